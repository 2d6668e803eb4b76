// The circuit breaker in front of the Redis store.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "redis/reporter.h"
#include "redis/steady_ns.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// Whether writes go to Redis. Closed (available) while Redis answers; a network failure,
// a timeout or a server that says it cannot serve opens it, and while it is open writes
// fail at once instead of each waiting for a deadline. It closes when a probe on the
// background connection finds a master that answers (RedisStore::probe).
//
// Threads: any thread reads it and may open it (a write that failed); only the loop
// thread closes it.
class CircuitBreaker {
 public:
  // `opened` runs each time it opens (from the thread that opened it): the store starts
  // probing then. `where` names the server in messages; `open_count` counts the open
  // circuits of a store's nodes.
  CircuitBreaker(Reporter& reporter, std::string where, std::atomic<int>& open_count,
                 std::function<void()> opened)
      : reporter_(reporter),
        where_(std::move(where)),
        open_count_(open_count),
        opened_(std::move(opened)) {}

  bool available() const noexcept { return available_.load(std::memory_order_acquire); }
  // The state found on starting: it stays closed if Redis answered (`failure` ok), else
  // opens (counted and logged as an outage that started now, without calling `opened`;
  // or, when Redis refused the credentials (an auth failure), logged once as the error in
  // the configuration it is). `why` says what failed.
  void start(const Status& failure, const std::string& why);
  // Opens it (logged once per outage). True if it was closed.
  bool open(const std::string& why);
  // Closes it. True if it was open (and then logs how long the outage lasted).
  bool close();
  // Closes it without a word: its server is no longer used (a primary replaced in a
  // failover), so it must not count as an outage.
  void retire();
  // When Redis might be back: what a request refused because of it should wait.
  std::chrono::nanoseconds retry_hint() const noexcept {
    return available() ? std::chrono::nanoseconds(0) : std::chrono::seconds(1);
  }
  std::uint64_t opens() const noexcept { return opens_.load(std::memory_order_relaxed); }
  // Nanoseconds since it last closed after an outage (INT64_MAX: never).
  std::int64_t back_for() const noexcept {
    const std::int64_t since = back_since_ns_.load(std::memory_order_relaxed);
    return since == INT64_MIN ? INT64_MAX : steady_ns() - since;
  }

 private:
  Reporter& reporter_;
  const std::string where_;
  std::atomic<int>& open_count_;
  const std::function<void()> opened_;
  std::atomic<bool> available_{true};
  std::atomic<std::uint64_t> opens_{0};
  std::atomic<std::int64_t> down_since_ns_{0};  // steady clock
  std::atomic<std::int64_t> back_since_ns_{INT64_MIN};  // steady clock; INT64_MIN: never
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
