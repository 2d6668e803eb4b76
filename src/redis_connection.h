// A blocking connection to Redis, for the application threads' round trips.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis_endpoint.h"

struct redisContext;
struct redisReply;

namespace ratewin::inline v1::detail {

// One hiredis context in blocking mode: connects within connect_timeout, logs in (AUTH
// with the ACL user if any, SELECT), then each round trip is bounded by command_timeout
// (socket send and receive timeouts). After any network failure or timeout the
// connection is broken() and must be dropped: its reply stream is out of step. Not
// thread-safe; a pool lends it to one thread at a time.
class RedisConnection {
 public:
  using Argv = std::vector<std::string_view>;
  using ReplyFn = std::function<void(std::size_t index, const redisReply& reply)>;

  // nullptr with `error` set when it cannot connect or log in.
  static std::unique_ptr<RedisConnection> open(const RedisEndpoint& endpoint,
                                               std::chrono::milliseconds connect_timeout,
                                               std::chrono::milliseconds command_timeout,
                                               std::string& error);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends the commands in one write and reads their replies (one round trip), calling
  // on_reply for each in order. Error replies are passed on; false (with `error`) means
  // a network failure or timeout.
  bool round_trip(std::span<const Argv> commands, const ReplyFn& on_reply, std::string& error);
  bool round_trip(const Argv& command, const ReplyFn& on_reply, std::string& error) {
    return round_trip(std::span<const Argv>(&command, 1), on_reply, error);
  }

  bool broken() const noexcept { return broken_; }

 private:
  explicit RedisConnection(redisContext* context) noexcept : context_(context) {}

  redisContext* context_;
  bool broken_ = false;
};

// The text of an error or status reply, for messages.
std::string reply_text(const redisReply& reply);

}  // namespace ratewin::inline v1::detail
