// What an engine admitted under FailurePolicy::partitioned while the store was away (the
// store never saw it), and in the window after it came back: so that the engine keeps to
// its share of every window that holds some of it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace ratewin {
inline namespace v1 {
namespace detail {

class OutageLedger {
 public:
  // Most admissions remembered at once: past that, new ones are not (the ledger errs
  // towards admitting, as the policies before it did).
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 20;

  // `cost` admitted at `t` for the limiter `hash`, whose window is `window` ns.
  void note(std::uint64_t hash, std::int64_t t, std::uint64_t cost, std::int64_t window) {
    std::lock_guard lock(mutex_);
    if (entries_ >= kMaxEntries) return;
    auto& list = by_limiter_[hash];
    list.emplace_back(t, cost);
    ++entries_;
    if (window > longest_.load(std::memory_order_relaxed))
      longest_.store(window, std::memory_order_relaxed);
    if (t > newest_.load(std::memory_order_relaxed)) newest_.store(t, std::memory_order_relaxed);
    // Published after what it vouches for: a reader that sees "not empty" sees them too.
    empty_.store(false, std::memory_order_release);
  }
  bool empty() const noexcept { return empty_.load(std::memory_order_acquire); }
  // What was noted for `hash` after `from`, and when the oldest of it was (INT64_MAX:
  // none). Drops what is older.
  std::uint64_t since(std::uint64_t hash, std::int64_t from, std::int64_t& oldest) {
    oldest = INT64_MAX;
    std::lock_guard lock(mutex_);
    const auto it = by_limiter_.find(hash);
    if (it == by_limiter_.end()) return 0;
    auto& list = it->second;
    while (!list.empty() && list.front().first <= from) {
      list.pop_front();
      --entries_;
    }
    std::uint64_t sum = 0;
    for (const auto& [t, cost] : list) sum += cost;
    if (!list.empty()) oldest = list.front().first;
    if (list.empty()) by_limiter_.erase(it);
    return sum;
  }
  // Forgets everything once no window noted can still hold any of it, `slack` later
  // (what comes after starts a ledger of its own: its own windows, its own newest).
  // Called on every decision of a partitioned limit while the ledger holds anything: it
  // takes the lock only once it has something to clear.
  void clear_if_done(std::int64_t now, std::int64_t slack) {
    if (!done(now, slack)) return;
    std::lock_guard lock(mutex_);
    if (!done(now, slack)) return;  // (noted meanwhile)
    by_limiter_.clear();
    entries_ = 0;
    longest_.store(0, std::memory_order_relaxed);
    newest_.store(INT64_MIN, std::memory_order_relaxed);
    empty_.store(true, std::memory_order_release);
  }

 private:
  // Whether `now` is more than `slack` past the end of the longest window noted, from the
  // newest admission noted (true when nothing is). Without overflow whatever the times.
  bool done(std::int64_t now, std::int64_t slack) const noexcept {
    const std::int64_t newest = newest_.load(std::memory_order_relaxed);
    if (newest == INT64_MIN) return true;
    std::int64_t until = 0;
    if (__builtin_add_overflow(newest, longest_.load(std::memory_order_relaxed), &until) ||
        __builtin_add_overflow(until, slack, &until))
      return false;
    return now > until;
  }

  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::deque<std::pair<std::int64_t, std::uint64_t>>> by_limiter_;
  std::size_t entries_ = 0;
  // Written under the lock; read without it by clear_if_done's first check, after
  // empty() (which a note publishes them with).
  std::atomic<std::int64_t> longest_{0};
  std::atomic<std::int64_t> newest_{INT64_MIN};
  std::atomic<bool> empty_{true};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
