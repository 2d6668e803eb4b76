// The approximate sliding window: pure arithmetic on counts, time is an argument.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/int128.h"
#include "core/seqlock_field.h"
#include "ratewin/decision.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// How the trailing subinterval (the one sliding out of the window) counts: what sets the
// ring's algorithms apart (ratewin::Algorithm).
enum class Trailing : std::uint8_t {
  interpolated,  // by its overlap with the sliding window (sliding_window)
  whole,         // in full until it leaves (strict_window)
  none,          // not at all (fixed_window, whose one subinterval is the window)
};

constexpr Trailing trailing_of(Algorithm algorithm) noexcept {
  switch (algorithm) {
    case Algorithm::strict_window:
      return Trailing::whole;
    case Algorithm::fixed_window:
      return Trailing::none;
    case Algorithm::sliding_window:
    case Algorithm::token_bucket:  // (no ring: never asked)
    case Algorithm::sliding_log:
      break;
  }
  return Trailing::interpolated;
}

// The fixed part of a window. Its N bucket counts live in storage the caller provides
// (the registry packs them right after its record, so a limiter is one allocation).
// Fields are SeqlockFields so that a lock-free reader may race with a writer (see Shard).
struct WindowState {
  SeqlockField<std::int64_t> epoch{0};  // epoch of the newest bucket, buckets[head]
  SeqlockField<std::uint64_t> sum{0};   // sum of the N buckets
  SeqlockField<std::uint32_t> trailing{
      0};                                 // count of epoch - N, the subinterval that just slid out
  SeqlockField<std::uint16_t> head{0};    // slot of `epoch` in the circular buffer
  SeqlockField<std::uint16_t> newest{0};  // slot of the newest non-zero bucket, when sum > 0
};
static_assert(sizeof(WindowState) == 24);
using Bucket = SeqlockField<std::uint32_t>;
static_assert(sizeof(Bucket) == 4);

// A view that reads and updates one window. Time t is in nanoseconds on the shared
// clock; epoch e = floor(t / R) with R the resolution; the buckets hold epochs
// e-N+1 .. e and `trailing` holds epoch e-N. The estimate of the count in the sliding
// window (t - N*R, t] is
//
//     E(t) = sum + trailing * ((e + 1) * R - t) / R
//
// and a request of cost c is allowed when E(t) + c <= max. All comparisons are made on
// E(t) * R in 128-bit integers, so they are exact. E(t) is continuous and
// non-increasing while nothing arrives (at a boundary the newest trailing count enters
// with weight 1), which is what makes retry_after exact.
//
// That is Trailing::interpolated, with one bound: the interpolation may discount the
// trailing count by at most D = floor(max / 4),
//
//     E(t) = sum + max(trailing * ((e + 1) * R - t) / R, trailing - D),
//
// so that E(t) >= (the exact count in (t - N*R, t]) - D and no window ever holds more
// than max + D, 1.25 x max: the interpolation assumes the trailing count spread evenly
// over its subinterval, and a client that sends its quota just before a subinterval
// ends, then again as that subinterval trails, got up to max + T(1 - w), nearly 2 x max.
// Spread traffic never meets the bound (a trailing count over max/4 is a quarter of the
// window in one subinterval), so its false rejections are those of the plain
// interpolation. E(t) stays non-increasing while nothing arrives, now with a step down
// at the boundary where a bounded trailing count leaves.
//
// With Trailing::whole the trailing count has weight 1
// for its whole epoch (E(t) = sum + trailing, an upper bound of the exact count in
// (t - N*R, t]); with Trailing::none weight 0 (E(t) = sum, with N = 1 the count of the
// fixed window t is in). Both are steps that fall at epoch boundaries, so retry_after
// is then a boundary.
//
// Time never moves a window back: a t before the current epoch is treated as the start
// of the current epoch.
class SlidingWindow {
 public:
  SlidingWindow(WindowState& state, Bucket* buckets, std::uint32_t subintervals,
                std::int64_t resolution_ns) noexcept
      : state_(state), buckets_(buckets), n_(subintervals), resolution_(resolution_ns) {}

  // floor(t / resolution), also for negative t.
  static std::int64_t epoch_of(std::int64_t t, std::int64_t resolution_ns) noexcept {
    const std::int64_t q = t / resolution_ns;
    return (t % resolution_ns < 0) ? q - 1 : q;
  }

  // Makes the window empty, positioned at t's epoch.
  void reset(std::int64_t t) noexcept;

  // True when t is not past the current epoch (advance(t) would change nothing).
  bool current_at(std::int64_t t) const noexcept {
    // One multiply, no division.
    return t - state_.epoch * resolution_ < resolution_;
  }

  // Slides forward to t's epoch; does nothing if t's epoch is not after the current.
  void advance(std::int64_t t) noexcept {
    if (!current_at(t)) slide(t);
  }

  // The decision try_acquire(t, max, cost) would return, without changing anything.
  // Returns false (and decides nothing) when t is past the current epoch, so that the
  // window would first have to advance. `max` must be at most Limit::kMaxCount.
  //
  // Safe on an inconsistent state, as a racing lock-free reader may see one: loops are
  // bounded by N, indexes are checked, arithmetic cannot overflow a signed type. The
  // result is then meaningless, and the reader's validation discards it.
  [[gnu::always_inline]] bool evaluate(std::int64_t t, std::uint64_t max, std::uint64_t cost,
                                       Trailing trailing_weight, Decision& out) const noexcept;

  // Decides a request of `cost` against `max` at t and counts it if allowed. cost > max
  // is rejected with retry_after = Decision::kNever.
  Decision try_acquire(std::int64_t t, std::uint64_t max, std::uint64_t cost,
                       Trailing trailing_weight = Trailing::interpolated) noexcept {
    advance(t);
    Decision d;
    evaluate(t, max, cost, trailing_weight, d);  // cannot fail: the window is at t's epoch or later
    if (d.allowed) add(cost);
    return d;
  }

  // Counts `cost` in the current epoch: the second half of try_acquire, for a caller
  // that got an allowing decision from evaluate() on this very state.
  void add(std::uint64_t cost) noexcept {
    if (cost == 0) return;
    // bucket <= sum <= max - cost <= kMaxCount - cost: the addition cannot overflow.
    buckets_[state_.head] += static_cast<std::uint32_t>(cost);
    state_.sum += cost;
    state_.newest = state_.head;
  }

  // Takes back `cost` counted in `epoch` (a write the store refused under a closed
  // failure policy). Nothing happens if that epoch is no longer in the buckets.
  void remove(std::int64_t epoch, std::uint64_t cost) noexcept;

  // E(t) * R for a limit of `max`, after advancing to t.
  u128 scaled_estimate(std::int64_t t, std::uint64_t max) noexcept;

  // The most the interpolation discounts a trailing count, for a limit of `max`.
  static constexpr std::uint64_t max_discount(std::uint64_t max) noexcept { return max / 4; }

  // The least an interpolated trailing count weighs, for a limit of `max`: trailing - D.
  static constexpr std::uint64_t least_trailing(std::uint32_t trailing,
                                                std::uint64_t max) noexcept {
    return trailing > max_discount(max) ? trailing - max_discount(max) : 0;
  }

  // A trailing count's weight times R: trailing * weight, but never below least * R.
  static u128 weighed_trailing(std::uint32_t trailing, std::uint64_t weight, std::uint64_t r,
                               std::uint64_t least) noexcept {
    const u128 part = static_cast<u128>(trailing) * weight;
    const u128 least_scaled = static_cast<u128>(least) * r;
    return part > least_scaled ? part : least_scaled;
  }

  // Raises the count held for `epoch` to at least `count`: a shared count already
  // includes this node's own requests, so it replaces rather than adds. An epoch older
  // than the trailing one is ignored; an epoch after the newest moves the window
  // forward to it first (never back). Counts saturate at Limit::kMaxCount. Returns whether
  // a count was raised.
  bool merge(std::int64_t epoch, std::uint64_t count) noexcept;

  // True when, at t, the window would hold nothing (E(t) == 0). Does not modify.
  bool empty_at(std::int64_t t) const noexcept;
  // The time from which the window holds nothing if nothing more is counted (the end
  // of the subinterval in which its newest count leaves); INT64_MIN when it is empty
  // already. Does not modify.
  std::int64_t empty_from() const noexcept;

  // Start of the newest epoch the window has moved to: its last activity.
  std::int64_t last_active_ns() const noexcept { return state_.epoch * resolution_; }

  // The newest epoch the window has moved to.
  std::int64_t epoch() const noexcept { return state_.epoch; }

  // Count held for `epoch`: a bucket, the trailing count, or 0 outside the window.
  std::uint32_t count_for_epoch(std::int64_t epoch) const noexcept;

  // Everything the window holds, its trailing count included: at the window's own epoch
  // the most E(t) can be, later an upper bound of it. O(1).
  std::uint64_t held() const noexcept {
    return static_cast<std::uint64_t>(state_.sum) + state_.trailing;
  }

 private:
  std::uint32_t slot_after(std::uint32_t slot) const noexcept {
    return slot + 1 == n_ ? 0 : slot + 1;
  }
  std::uint32_t slot_before(std::uint32_t slot) const noexcept {
    return (slot == 0 ? n_ : slot) - 1;
  }
  // How many epochs older than the head `slot` is (both < N).
  std::uint32_t age_of(std::uint32_t slot, std::uint32_t head) const noexcept {
    return head >= slot ? head - slot : head + n_ - slot;
  }
  // advance() across at least one epoch boundary.
  void slide(std::int64_t t) noexcept;
  std::int64_t retry_at(std::int64_t at, std::uint64_t allowance, std::uint64_t discount,
                        std::int64_t epoch, std::uint64_t sum, std::uint32_t trailing,
                        std::uint32_t head, std::uint32_t newest,
                        Trailing trailing_weight) const noexcept;
  // The k-th count in epoch order: 0 = trailing (epoch e-N), k = 1..N the bucket of
  // epoch e-N+k (so k = N is the newest).
  std::uint32_t in_order(std::uint32_t k) const noexcept;

  WindowState& state_;
  Bucket* buckets_;
  std::uint32_t n_;
  std::int64_t resolution_;
};

// Inline: the decision path of every request.
inline bool SlidingWindow::evaluate(std::int64_t t, std::uint64_t max, std::uint64_t cost,
                                    Trailing trailing_weight, Decision& out) const noexcept {
  // Epoch-derived arithmetic wraps (int128.h): exact on a consistent state, defined on a
  // torn one (where the epoch may belong to a record of another resolution).
  const std::int64_t epoch = state_.epoch;
  const std::int64_t start = wrapping_mul(epoch, resolution_);
  if (wrapping_sub(t, start) >= resolution_) return false;
  const std::uint32_t head = state_.head;
  const std::uint32_t newest = state_.newest;
  if (head >= n_ || newest >= n_) return false;  // only on a torn read
  const std::uint64_t sum = state_.sum;
  const std::uint32_t trailing = state_.trailing;
  const auto r = static_cast<std::uint64_t>(resolution_);
  const std::int64_t at = t > start ? t : start;  // never before the current epoch
  // Overlap of the trailing subinterval with the sliding window, in (0, R], as the
  // trailing count's weight (times R).
  const std::uint64_t weight =
      trailing_weight == Trailing::interpolated
          ? static_cast<std::uint64_t>(wrapping_sub(wrapping_add(start, resolution_), at))
      : trailing_weight == Trailing::whole ? r
                                           : 0;
  // Counts stop counting when they trail (none) or once they have trailed (else).
  const std::uint32_t lasts = trailing_weight == Trailing::none ? n_ - 1 : n_;
  // An interpolated trailing count is discounted by at most D (see above).
  const std::uint64_t discount = max_discount(max);
  const std::uint64_t least =
      trailing_weight == Trailing::interpolated ? least_trailing(trailing, max) : 0;
  const u128 scaled = static_cast<u128>(sum) * r + weighed_trailing(trailing, weight, r, least);
  // The end of the epoch e + k, as an absolute time.
  auto end_of = [&](std::uint32_t k) noexcept {
    return wrapping_mul(wrapping_add(epoch, std::int64_t{k} + 1), resolution_);
  };
  // The window holds nothing from the end of the epoch in which its newest count trails.
  const std::int64_t reset_at = sum != 0 ? end_of(lasts - age_of(newest, head))
                                : trailing != 0 && weight != 0 ? end_of(0)
                                                               : t;
  // floor(max - E) = max - sum - max(ceil(trailing * weight / R), least), 0 if E > max.
  auto remaining = [&]() noexcept -> std::uint64_t {
    const std::uint64_t trailing_part = std::max<std::uint64_t>(
        (weight >= r || trailing == 0) ? trailing : mul_div_ceil(trailing, weight, r), least);
    const std::uint64_t used = sum + trailing_part;
    return used >= max ? 0 : max - used;
  };
  out.limit = max;
  out.degraded = false;
  if (cost <= max && scaled <= static_cast<u128>(max - cost) * r) {
    out.allowed = true;
    out.remaining = remaining() - cost;  // E + cost <= max, so floor(max - E) >= cost
    out.reset_after =
        std::chrono::nanoseconds(wrapping_sub(cost != 0 ? end_of(lasts) : reset_at, t));
    out.retry_after = std::chrono::nanoseconds(0);
    return true;
  }
  out.allowed = false;
  // A rejected request of cost 1 has E > max - 1: its remaining is 0 without dividing.
  out.remaining = cost > 1 ? remaining() : 0;
  out.reset_after = std::chrono::nanoseconds(wrapping_sub(reset_at, t));
  out.retry_after =
      cost > max
          ? Decision::kNever
          : std::chrono::nanoseconds(wrapping_sub(
                retry_at(at, max - cost, discount, epoch, sum, trailing, head, newest,
                         trailing_weight),
                t));
  return true;
}

// While nothing arrives, during epoch e+k the estimate is S_k + T_k * (end_k - t) / R,
// with T_k the k-th count in epoch order (0 = trailing), S_k the sum of those after it,
// and end_k = (e+k+1) * R. S_k only falls with k: find the first k with S_k <= allowance,
// then solve the linear piece inside epoch e+k. Requires that the request does not fit
// at `at`; the other arguments are evaluate()'s snapshot of the state.
//
// The bound makes it S_k + max(T_k * (end_k - t) / R, T_k - D): when S_k + T_k - D is
// over the allowance, the answer is end_k (where it falls to S_k).
//
// With Trailing::whole the estimate in epoch e+k is S_k + T_k, which falls to S_k at
// end_k: the answer is end_k. With Trailing::none it is S_k from the start of epoch e+k:
// the answer is end_k - R.
inline std::int64_t SlidingWindow::retry_at(std::int64_t at, std::uint64_t allowance,
                                            std::uint64_t discount, std::int64_t epoch,
                                            std::uint64_t sum, std::uint32_t trailing,
                                            std::uint32_t head, std::uint32_t newest,
                                            Trailing trailing_weight) const noexcept {
  std::uint32_t k = 0;
  std::uint64_t rest = sum;
  std::uint64_t relief = trailing;  // T_k
  if (rest > allowance) {
    const std::uint32_t oldest = buckets_[slot_after(head)];
    if (rest - oldest <= allowance) {
      // Steady overload: dropping the oldest subinterval is enough.
      k = 1;
      relief = oldest;
      rest -= oldest;
    } else {
      // Otherwise walk from the newest count (the buckets after it are empty): the first
      // bucket whose count, added to the newer ones, exceeds the allowance is the one
      // whose trailing turn brings relief. A burst is found at once.
      std::uint64_t newer = 0;
      std::uint32_t slot = newest;
      for (std::uint32_t j = age_of(newest, head); j < n_; ++j) {
        const std::uint32_t count = buckets_[slot];
        if (newer + count > allowance) {
          k = n_ - j;
          relief = count;
          rest = newer;
          break;
        }
        newer += count;
        slot = slot_before(slot);
      }
    }
  }
  const std::int64_t end = wrapping_mul(wrapping_add(epoch, std::int64_t{k} + 1), resolution_);
  if (rest > allowance || relief == 0) return end;  // only on an inconsistent state
  // Allowed from t on when T * (end - t) <= (allowance - S) * R; the slack is < R.
  const auto r = static_cast<std::uint64_t>(resolution_);
  // (Interpolated, but held at T - D all epoch long: relief at its end, as for whole.)
  const bool held = relief > discount && relief - discount > allowance - rest;
  const std::uint64_t slack =
      trailing_weight == Trailing::interpolated
          ? (held ? 0 : std::min(r, mul_div_floor(allowance - rest, r, relief)))
      : trailing_weight == Trailing::whole ? 0
                                           : r;
  return std::max(at, wrapping_sub(end, static_cast<std::int64_t>(slack)));
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
