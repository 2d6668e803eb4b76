#include "redis/clock_sync.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>

#include "redis/async.h"
#include "redis/connection.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

Status ClockSync::measure(RedisConnection& connection, int samples) {
  for (int i = 0; i < samples; ++i) {
    const std::int64_t sent = clock_->now().count();
    std::optional<std::int64_t> server;
    std::string refusal;
    if (Status status = connection.round_trip({"TIME"},
                                              [&](std::size_t, const redisReply& r) {
                                                server = server_time(r);
                                                if (!server) refusal = reply_text(r);
                                              });
        !status.ok()) {
      return status;
    }
    if (!server) {
      refused(refusal);
      return {};
    }
    take_sample(sent, clock_->now().count(), *server);
  }
  return {};
}

void ClockSync::probe(AsyncRedis& connection, int samples) {
  if (!connection.ready()) return;
  const std::int64_t sent = clock_->now().count();
  connection.command({"TIME"},
                     [this, &connection, sent, samples](const redisReply* r, const Status&) {
                       const std::int64_t received = clock_->now().count();
                       if (r == nullptr)
                         return;  // the connection failed: the next probe tries again
                       const std::optional<std::int64_t> server = server_time(*r);
                       if (!server) {
                         refused(reply_text(*r));
                         return;
                       }
                       take_sample(sent, received, *server);
                       if (samples > 1) probe(connection, samples - 1);
                     });
}

std::optional<std::int64_t> ClockSync::server_time(const redisReply& r) {
  // TIME: [seconds, microseconds], both decimal strings.
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) return std::nullopt;
  std::int64_t parts[2] = {0, 0};
  for (std::size_t i = 0; i < 2; ++i) {
    const redisReply* e = r.element[i];
    if (e == nullptr || e->type != REDIS_REPLY_STRING) return std::nullopt;
    const auto [end, ec] = std::from_chars(e->str, e->str + e->len, parts[i]);
    if (ec != std::errc() || end != e->str + e->len || parts[i] < 0) return std::nullopt;
  }
  if (parts[0] == 0 || parts[0] > 9'000'000'000 || parts[1] >= 1'000'000) return std::nullopt;
  return parts[0] * 1'000'000'000 + parts[1] * 1'000;
}

void ClockSync::take_sample(std::int64_t sent, std::int64_t received, std::int64_t server_ns) {
  const std::int64_t rtt = received - sent;
  const std::int64_t offset = server_ns - (sent + rtt / 2);
  if (!samples_.empty()) {
    // Each sample is known to within its round trip: a new offset outside what the best
    // one allows means a clock stepped (NTP, a VM migration), and the old samples
    // describe a clock that no longer exists.
    const auto best = *std::min_element(samples_.begin(), samples_.end());
    const std::int64_t slack = best.first + rtt + 1'000'000;
    if (offset > best.second + slack || offset < best.second - slack) samples_.clear();
  }
  samples_.emplace_back(rtt, offset);
  if (samples_.size() > 8) samples_.erase(samples_.begin());
  const auto best = *std::min_element(samples_.begin(), samples_.end());
  rtt_ns_.store(best.first, std::memory_order_relaxed);
  offset_ns_.store(best.second, std::memory_order_relaxed);
}

void ClockSync::refused(const std::string& reply) {
  reporter_.note_error("TIME refused: " + reply, /*aside=*/true);
  if (!warned_.exchange(true)) {
    reporter_.log(LogLevel::warning, "Redis at " + reporter_.where() + " refuses TIME (" + reply +
                                         "); epochs follow this node's own clock, so nodes whose "
                                         "clocks differ will not agree on subinterval boundaries");
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
