// A token bucket as GCRA (the generic cell rate algorithm): pure arithmetic on one
// theoretical arrival time, with time as an argument.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/int128.h"
#include "core/window.h"
#include "ratewin/decision.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// What a token bucket's decisions need of its limit.
struct BucketRule {
  std::uint64_t burst;     // the most admitted at once
  std::int64_t emission;   // ns per unit: the refill of one
  std::int64_t tolerance;  // burst x emission: the refill of the whole burst

  static BucketRule of(const Limit& limit) noexcept {
    return {limit.burst(), limit.emission_ns(), limit.tolerance_ns()};
  }
};

// A view that reads and updates one token bucket kept in a WindowState, whose `epoch`
// field holds the theoretical arrival time (TAT): the time at which the bucket is full
// again if nothing more arrives (0: full long ago; the other fields are unused). At time t
// the bucket is short of backlog(t) = max(TAT - t, 0) of refill; a request of cost c
// is allowed when backlog(t) + c x emission <= tolerance, and moves TAT to
// max(TAT, t) + c x emission. So admitted in any span of time d is at most
// burst + d / emission, and retry_after is exact: the backlog falls by 1 ns per ns.
class TokenBucket {
 public:
  explicit TokenBucket(WindowState& state) noexcept : state_(state) {}

  // Full: nothing counted.
  void reset() noexcept { state_.epoch = 0; }
  std::int64_t tat() const noexcept { return state_.epoch; }

  // The decision for a request of `cost` at t, without changing anything. Safe on an
  // inconsistent state, as a racing lock-free reader may see one (arithmetic wraps and
  // nothing divides by a value read); the reader's validation then discards the result.
  void evaluate(std::int64_t t, const BucketRule& rule, std::uint64_t cost,
                Decision& out) const noexcept {
    decide(state_.epoch, t, rule, cost, out);
  }
  // The same for a bucket whose TAT is `tat`.
  [[gnu::always_inline]] static void decide(std::int64_t tat, std::int64_t t,
                                            const BucketRule& rule, std::uint64_t cost,
                                            Decision& out) noexcept;

  // Counts `cost` at t (after an allowing decision at t).
  void add(std::int64_t t, std::uint64_t cost, const BucketRule& rule) noexcept {
    const std::int64_t tat = state_.epoch;
    state_.epoch = (tat > t ? tat : t) + static_cast<std::int64_t>(cost) * rule.emission;
  }
  // Takes back `cost` counted before (never to a TAT before t: a bucket is at most full).
  // Returns the units taken back, at most what the backlog at t holds.
  std::uint64_t remove(std::int64_t t, std::uint64_t cost, const BucketRule& rule) noexcept {
    const std::uint64_t taken = held(t, cost, rule);
    if (taken == 0) return 0;
    const std::int64_t back = state_.epoch - static_cast<std::int64_t>(taken) * rule.emission;
    state_.epoch = back > t ? back : t;
    return taken;
  }
  // What remove(t, cost) would take back: `cost`, at most the backlog at t in units
  // (rounded up).
  std::uint64_t held(std::int64_t t, std::uint64_t cost, const BucketRule& rule) const noexcept {
    const std::int64_t tat = state_.epoch;
    if (tat <= t) return 0;
    const auto units = static_cast<std::uint64_t>((tat - t + rule.emission - 1) / rule.emission);
    return cost < units ? cost : units;
  }
  // Takes in a TAT known to be at least as late: the later of the two.
  void merge(std::int64_t tat) noexcept {
    if (tat > state_.epoch) state_.epoch = tat;
  }
  // Takes the store's TAT as this bucket's: the store decides every admission, so a copy
  // that lags it only costs round trips, while one ahead of it (a reset elsewhere, counts
  // made while the store was away) would refuse what the store admits.
  void assign(std::int64_t tat) noexcept { state_.epoch = tat; }
  // The time from which the bucket is full if nothing more is counted.
  std::int64_t empty_from() const noexcept { return state_.epoch; }

 private:
  WindowState& state_;
};

inline void TokenBucket::decide(std::int64_t tat, std::int64_t t, const BucketRule& rule,
                                std::uint64_t cost, Decision& out) noexcept {
  const std::int64_t tolerance = rule.tolerance;
  const std::int64_t emission = rule.emission > 0 ? rule.emission : 1;
  // The backlog, within [0, tolerance] on a consistent state (clamped on another).
  std::int64_t backlog = tat > t ? wrapping_sub(tat, t) : 0;
  if (backlog < 0) backlog = 0;
  const auto remaining_at = [&](std::int64_t b) noexcept -> std::uint64_t {
    return b >= tolerance ? 0 : static_cast<std::uint64_t>((tolerance - b) / emission);
  };
  out.limit = rule.burst;
  out.degraded = false;
  if (cost > rule.burst) {
    out.allowed = false;
    out.remaining = remaining_at(backlog);
    out.reset_after = std::chrono::nanoseconds(backlog);
    out.retry_after = Decision::kNever;
    return;
  }
  const std::int64_t need = static_cast<std::int64_t>(cost) * emission;  // <= tolerance
  if (backlog <= tolerance - need) {
    out.allowed = true;
    out.remaining = remaining_at(backlog + need);
    out.reset_after = std::chrono::nanoseconds(backlog + need);
    out.retry_after = std::chrono::nanoseconds(0);
    return;
  }
  out.allowed = false;
  out.remaining = remaining_at(backlog);
  out.reset_after = std::chrono::nanoseconds(backlog);
  out.retry_after = std::chrono::nanoseconds(wrapping_sub(wrapping_add(backlog, need), tolerance));
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
