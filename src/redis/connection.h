// A blocking connection to Redis, for the application threads' round trips.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redis/endpoint.h"

struct redisContext;
struct redisReply;

namespace ratewin::inline v1::detail {

// One hiredis context in blocking mode: connects and logs in (AUTH with the ACL user if
// any, SELECT) within connect_timeout, then each round trip is bounded by the caller's
// deadline and by command_timeout (socket send and receive timeouts). After any network
// failure or timeout the connection is broken() and must be dropped: its reply stream is
// out of step. SIGPIPE is kept from the process while it writes. Not thread-safe; a pool
// lends it to one thread at a time.
class RedisConnection {
 public:
  using Argv = std::vector<std::string_view>;
  using ReplyFn = std::function<void(std::size_t index, const redisReply& reply)>;
  using Deadline = std::chrono::steady_clock::time_point;

  // nullptr with `error` set when it cannot connect or log in.
  static std::unique_ptr<RedisConnection> open(const RedisEndpoint& endpoint,
                                               std::chrono::milliseconds connect_timeout,
                                               std::chrono::milliseconds command_timeout,
                                               std::string& error);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends the commands in one write and reads their replies (one round trip), calling
  // on_reply for each in order, giving up at `deadline` (or after command_timeout,
  // whichever is sooner). Error replies are passed on; false (with `error`) means a
  // network failure or timeout.
  bool round_trip(std::span<const Argv> commands, const ReplyFn& on_reply, Deadline deadline,
                  std::string& error);
  bool round_trip(const Argv& command, const ReplyFn& on_reply, Deadline deadline,
                  std::string& error) {
    return round_trip(std::span<const Argv>(&command, 1), on_reply, deadline, error);
  }
  // The same with the deadline command_timeout from now.
  bool round_trip(const Argv& command, const ReplyFn& on_reply, std::string& error) {
    return round_trip(command, on_reply, std::chrono::steady_clock::now() + command_timeout_,
                      error);
  }

  // The two halves of a round trip, so that one caller can have commands in flight on
  // several connections at once (to several Cluster nodes): send() writes the commands
  // out, receive() reads `count` replies. Bounded like round_trip.
  bool send(std::span<const Argv> commands, Deadline deadline, std::string& error);
  bool receive(std::size_t count, const ReplyFn& on_reply, Deadline deadline, std::string& error);

  // For a subscribed connection, where Redis speaks first: waits up to `wait` for one
  // message and passes it to on_reply (index 0). kIdle: nothing came, the connection is
  // still good. A message that has started arriving is read to its end within
  // command_timeout.
  enum class Received { kMessage, kIdle, kFailed };
  Received receive(const ReplyFn& on_reply, std::chrono::milliseconds wait, std::string& error);

  // False when the server has closed its end (an idle timeout, a restart): checked
  // without blocking before an idle connection is used again.
  bool alive() const noexcept;
  // Marks the connection to be dropped rather than reused.
  void discard() noexcept { broken_ = true; }
  bool broken() const noexcept { return broken_; }

 private:
  RedisConnection(redisContext* context, std::chrono::milliseconds command_timeout) noexcept
      : context_(context), command_timeout_(command_timeout), socket_timeout_(command_timeout) {}
  // Sets the socket timeouts to what is left until `deadline`, at most command_timeout.
  // False (with `error`) when nothing is left.
  bool bound_by(Deadline deadline, std::string& error);
  // What the last failed read or write says.
  std::string failure_text() const;

  redisContext* context_;
  const std::chrono::milliseconds command_timeout_;
  std::chrono::milliseconds socket_timeout_;  // what the socket is set to now
  bool broken_ = false;
};

// The text of an error or status reply, for messages.
std::string reply_text(const redisReply& reply);

// An error reply saying this server cannot serve now (read-only replica, loading its
// data, its master is down, busy running a script): to be treated like a lost
// connection, so that the circuit opens and the connection is made again.
bool server_unavailable(const redisReply& reply);

}  // namespace ratewin::inline v1::detail
