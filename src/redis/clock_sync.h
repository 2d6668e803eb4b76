// The offset from an engine's clock to the Redis server's clock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ratewin/clock.h"
#include "redis/reporter.h"
#include "redis/status.h"

struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

class AsyncRedis;
class RedisConnection;

// Measures the offset of the engine's clock to Redis' TIME, NTP-style (the server read
// its clock somewhere within the round trip: assume the middle), keeps the last 8
// samples and trusts the one with the shortest round trip. A sample outside what the
// best one allows means a clock stepped, and the old samples are dropped. So nodes whose
// clocks disagree still cut epochs at the same instants: they all use Redis' clock.
//
// Threads: offset() and rtt() from any thread; the measurements on the thread that
// constructs the store (measure(), before the loop starts) and then on the loop thread
// only (probe()).
class ClockSync {
 public:
  ClockSync(std::shared_ptr<const Clock> clock, Reporter& reporter)
      : clock_(std::move(clock)), reporter_(reporter) {}

  // Nanoseconds to add to the engine's clock to read Redis' clock (0 until measured).
  std::int64_t offset() const noexcept { return offset_ns_.load(std::memory_order_relaxed); }
  std::int64_t rtt() const noexcept { return rtt_ns_.load(std::memory_order_relaxed); }
  // Redis' time now, as this engine reckons it.
  std::int64_t now() const noexcept { return clock_->now().count() + offset(); }

  // `samples` TIME round trips on a blocking connection. A failure if the connection
  // failed; a server that refuses TIME is not one (see refused()).
  Status measure(RedisConnection& connection, int samples);
  // `samples` TIME commands one after another on the background connection.
  void probe(AsyncRedis& connection, int samples);

 private:
  // The server's clock from a TIME reply, in ns since the Unix epoch; nothing if the
  // reply is not a well-formed TIME (an error: TIME may be denied by an ACL or renamed).
  static std::optional<std::int64_t> server_time(const redisReply& reply);
  void take_sample(std::int64_t sent, std::int64_t received, std::int64_t server_ns);
  // TIME was refused: the offset stays as it is; warns once.
  void refused(const std::string& reply);

  const std::shared_ptr<const Clock> clock_;
  Reporter& reporter_;
  std::atomic<std::int64_t> offset_ns_{0};
  std::atomic<std::int64_t> rtt_ns_{0};
  std::atomic<bool> warned_{false};
  std::vector<std::pair<std::int64_t, std::int64_t>> samples_;  // (rtt, offset)
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
