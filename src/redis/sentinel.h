// Finding a Redis primary through Redis Sentinel, and following its failovers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "redis/endpoint.h"
#include "redis/reporter.h"
#include "redis/status.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class RedisConnection;

// Asks the sentinels of a `redis-sentinel://` address where the primary is (SENTINEL
// get-master-addr-by-name, each sentinel in turn until one knows), checks the answer
// with ROLE on the primary itself (a sentinel may not have noticed a failover yet), and
// then follows failovers on a thread of its own: subscribed to +switch-master on a
// sentinel, it asks again when one is announced, when the store asks (a lost connection,
// a READONLY reply: ask()), and every 10 s (every 250 ms while no primary is known). Each primary found is handed to `found`
// (from this thread; the same address again is not handed over twice in a row).
//
// Threads: resolve() on the caller's; start(), ask() and stop() from any thread.
class SentinelWatch {
 public:
  struct Primary {
    std::string host;
    int port = 0;
    bool operator==(const Primary&) const = default;
  };

  SentinelWatch(RedisAddress address, std::chrono::milliseconds connect_timeout,
                std::chrono::milliseconds command_timeout, Reporter& reporter,
                std::function<void(const Primary&)> found);
  ~SentinelWatch();  // stop()s
  SentinelWatch(const SentinelWatch&) = delete;
  SentinelWatch& operator=(const SentinelWatch&) = delete;

  // Asks now, on the calling thread: the primary (checked with ROLE), or an empty host
  // (with `status` saying why) if no sentinel knows one that answers as a primary.
  Primary resolve(Status& status);
  // Starts following failovers.
  void start();
  // Asks the sentinels again soon.
  void ask();
  void stop();

 private:
  void run();
  // Subscribed to +switch-master on one sentinel until a switch is announced, ask() is
  // called or `at_most` passes (true), or the connection fails (false).
  bool watch(RedisConnection& sentinel, std::chrono::milliseconds at_most);
  bool stopping() const noexcept { return stop_.load(std::memory_order_acquire); }

  const RedisAddress address_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds command_timeout_;
  Reporter& reporter_;
  const std::function<void(const Primary&)> found_;
  std::size_t next_sentinel_ = 0;  // the watcher thread's (and resolve()'s before it)
  Primary last_;                   // the last primary handed over
  std::atomic<bool> stop_{false};
  std::atomic<bool> asked_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
