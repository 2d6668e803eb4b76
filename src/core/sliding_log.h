// The exact sliding log: pure arithmetic on the expiry times of what was admitted, with
// time as an argument.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/int128.h"
#include "core/seqlock_field.h"
#include "core/window.h"
#include "ratewin/decision.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// What a log's decisions need of its limit.
struct LogRule {
  std::uint64_t max;
  std::int64_t window;  // ns: the interval

  static LogRule of(const Limit& limit) noexcept {
    return {limit.max(), static_cast<std::int64_t>(limit.interval().count()) * 1'000'000};
  }
};

using LogEntry = SeqlockField<std::int64_t>;

// A view that reads and updates one sliding log: a ring of up to `capacity` (the limit's
// max) entries in storage the caller provides, each the expiry time of one admitted
// unit (its admission time plus the interval), oldest first. An entry counts at t while
// its expiry is after t, so a request of cost c at t is allowed when the entries live at
// t plus c are at most max: exactly "at most max admitted in any (t - interval, t]".
//
// In a WindowState: `head` is the oldest entry's slot and `newest` the number of
// entries (both < 2^16, as capacity is at most Limit::kMaxLogCount). With a shared store,
// `sum` and `epoch` say what the store's log held when it last answered: `sum` entries,
// none leaving before `epoch`, which this engine's own entries (the others here) are
// among; that count is trusted until `trailing` ms before `epoch` (another engine may
// take entries back). A decision counts the larger of the two, so a log that the store
// found full refuses here without a round trip, until the store may know better.
class SlidingLog {
 public:
  SlidingLog(WindowState& state, LogEntry* entries, std::uint32_t capacity) noexcept
      : state_(state), entries_(entries), capacity_(capacity) {}

  // Empty, as new.
  void reset() noexcept {
    state_.head = 0;
    state_.newest = 0;
    state_.sum = 0;
    state_.epoch = 0;
  }
  std::uint32_t size() const noexcept { return state_.newest; }

  // The decision for a request of `cost` at t, without changing anything. Safe on an
  // inconsistent state, as a racing lock-free reader may see one (indexes are checked,
  // loops bounded by the capacity); the reader's validation then discards the result.
  void evaluate(std::int64_t t, const LogRule& rule, std::uint64_t cost,
                Decision& out) const noexcept;

  // The expiry the entries of a request admitted at t get: t + window, or the newest
  // entry's if that is later (a clock read before another thread's), so entries stay in
  // order.
  std::int64_t expiry_at(std::int64_t t, const LogRule& rule) const noexcept {
    const std::int64_t expiry = t + rule.window;
    const std::uint32_t n = size();
    if (n == 0) return expiry;
    const std::int64_t newest = entry(n - 1);
    return newest > expiry ? newest : expiry;
  }
  // Counts `cost` at t (after an allowing decision at t): drops what expired, and adds
  // `cost` entries that expire at expiry_at(t). Returns that expiry.
  std::int64_t add(std::int64_t t, std::uint64_t cost, const LogRule& rule) noexcept;
  // Takes back up to `cost` entries that expire at `expiry` (counted by add()), from the
  // store's count as well; returns how many it took.
  std::uint64_t remove(std::int64_t expiry, std::uint64_t cost) noexcept;
  // The newest entry live at t whose expiry is before `before` (INT64_MAX: any), and how
  // many entries share that expiry, in *count; false when there is none. (Refunds walk the
  // newest entries this way.)
  bool newest_before(std::int64_t t, std::int64_t before, std::int64_t& expiry,
                     std::uint64_t& count) const noexcept;
  // Takes in what the store's log held: `count` entries, none leaving before `until`,
  // trusted until `trusted` (at most `until`).
  void learn(std::int64_t until, std::int64_t trusted, std::uint64_t count) noexcept {
    constexpr std::int64_t kMs = 1'000'000;
    const std::int64_t gap = (until - (trusted < until ? trusted : until) + kMs - 1) / kMs;
    state_.epoch = until;
    state_.trailing = static_cast<std::uint32_t>(gap < 0xffffffffLL ? gap : 0xffffffffLL);
    state_.sum = count;
  }
  // Until when the store's count is trusted (INT64_MAX when there is none): a refusal
  // that rests on it holds no longer.
  std::int64_t trusted_until() const noexcept {
    if (state_.sum == 0) return INT64_MAX;
    return wrapping_sub(state_.epoch, static_cast<std::int64_t>(state_.trailing) * 1'000'000);
  }
  // The time from which the log holds nothing if nothing more is counted.
  std::int64_t empty_from() const noexcept {
    const std::uint32_t n = size();
    const std::int64_t own = n == 0 ? INT64_MIN : entry(n - 1);
    const std::int64_t shared = state_.sum != 0 ? state_.epoch.load() : INT64_MIN;
    return own > shared ? own : shared;
  }

 private:
  // The slot of the k-th entry from `head` (head < capacity, k <= capacity).
  std::uint32_t slot(std::uint32_t head, std::uint32_t k) const noexcept {
    return head + k >= capacity_ ? head + k - capacity_ : head + k;
  }
  // The k-th entry, oldest first (k < size()).
  std::int64_t entry(std::uint32_t k) const noexcept { return entries_[slot(state_.head, k)]; }
  // The first of the n entries (from head) that is live at t: n when none is.
  std::uint32_t first_live(std::int64_t t, std::uint32_t head, std::uint32_t n) const noexcept {
    std::uint32_t lo = 0;
    std::uint32_t hi = n;
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (entries_[slot(head, mid)] > t) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  WindowState& state_;
  LogEntry* entries_;
  std::uint32_t capacity_;
};

inline void SlidingLog::evaluate(std::int64_t t, const LogRule& rule, std::uint64_t cost,
                                 Decision& out) const noexcept {
  const std::uint64_t max = rule.max;
  std::uint32_t head = state_.head;
  std::uint32_t n = state_.newest;
  if (head >= capacity_ || n > capacity_) head = n = 0;  // only on a torn read
  const std::uint32_t first = first_live(t, head, n);
  const std::uint64_t own = n - first;
  const std::int64_t shared_until = state_.epoch;
  const std::uint64_t shared =
      t < trusted_until() && t < shared_until ? state_.sum.load() : 0;
  const std::uint64_t used = own > shared ? own : shared;
  auto at = [&](std::uint32_t k) noexcept { return entries_[slot(head, k)].load(); };
  // Holds nothing from the later of its newest entry's expiry and the store's.
  std::int64_t reset_at = t;
  if (own != 0 && at(n - 1) > reset_at) reset_at = at(n - 1);
  if (shared != 0 && shared_until > reset_at) reset_at = shared_until;
  out.limit = max;
  out.degraded = false;
  out.remaining = used >= max ? 0 : max - used;
  if (cost <= max && used <= max - cost) {
    out.allowed = true;
    out.remaining -= cost;
    const std::int64_t expiry = n != 0 && at(n - 1) > t + rule.window ? at(n - 1) : t + rule.window;
    out.reset_after =
        std::chrono::nanoseconds(wrapping_sub(cost != 0 && expiry > reset_at ? expiry : reset_at, t));
    out.retry_after = std::chrono::nanoseconds(0);
    return;
  }
  out.allowed = false;
  out.reset_after = std::chrono::nanoseconds(wrapping_sub(reset_at, t));
  if (cost > max) {
    out.retry_after = Decision::kNever;
    return;
  }
  // Allowed once enough of its own entries have left (the (own + cost - max)-th oldest
  // live one), and once the store's count may have fallen.
  std::int64_t retry = t;
  if (own + cost > max) retry = at(first + static_cast<std::uint32_t>(own + cost - max) - 1);
  if (shared + cost > max && shared_until > retry) retry = shared_until;
  out.retry_after = std::chrono::nanoseconds(wrapping_sub(retry, t));
}

inline std::int64_t SlidingLog::add(std::int64_t t, std::uint64_t cost,
                                    const LogRule& rule) noexcept {
  const std::int64_t expiry = expiry_at(t, rule);
  std::uint32_t head = state_.head;
  std::uint32_t n = state_.newest;
  const std::uint32_t gone = first_live(t, head, n);
  head = slot(head, gone);
  n -= gone;
  for (std::uint64_t i = 0; i < cost; ++i) {
    if (n == capacity_) {  // (cannot happen after an allowing decision: the oldest goes)
      head = slot(head, 1);
      --n;
    }
    entries_[slot(head, n)] = expiry;
    ++n;
  }
  state_.head = static_cast<std::uint16_t>(head);
  state_.newest = static_cast<std::uint16_t>(n);
  return expiry;
}

inline std::uint64_t SlidingLog::remove(std::int64_t expiry, std::uint64_t cost) noexcept {
  const std::uint32_t n = size();
  // The entries after the last one with this expiry move down over the ones taken.
  std::uint32_t end = n;  // one past the last entry with `expiry`
  while (end > 0 && entry(end - 1) > expiry) --end;
  std::uint32_t begin = end;
  while (begin > 0 && entry(begin - 1) == expiry && end - begin < cost) --begin;
  const std::uint32_t taken = end - begin;
  if (taken == 0) return 0;
  const std::uint32_t head = state_.head;
  for (std::uint32_t k = end; k < n; ++k) entries_[slot(head, k - taken)] = entry(k);
  state_.newest = static_cast<std::uint16_t>(n - taken);
  // The store's count held them too (a give-back or a refund takes them from it as well).
  const std::uint64_t shared = state_.sum;
  state_.sum = shared - (taken < shared ? taken : shared);
  return taken;
}

inline bool SlidingLog::newest_before(std::int64_t t, std::int64_t before, std::int64_t& expiry,
                                      std::uint64_t& count) const noexcept {
  std::uint32_t k = size();
  while (k > 0 && entry(k - 1) >= before) --k;
  if (k == 0 || entry(k - 1) <= t) return false;
  expiry = entry(k - 1);
  count = 0;
  while (k > 0 && entry(k - 1) == expiry) {
    --k;
    ++count;
  }
  return true;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
