// A blocking connection to Redis, for the application threads' round trips.
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "redis/endpoint.h"
#include "redis/resp.h"
#include "redis/status.h"
#include "redis/transport.h"

struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

// One connection whose calls wait: connects and logs in (AUTH with the ACL user if any,
// SELECT) within connect_timeout, then each round trip is bounded by the caller's
// deadline and by command_timeout. Commands are written into out() (RESP, encoded once,
// into a buffer the connection keeps) and sent as they are; replies are parsed into
// recycled objects, so a steady round trip allocates nothing. After any network failure
// or timeout the connection is broken() and must be dropped: its reply stream is out of
// step. Not thread-safe; a pool lends it to one thread at a time.
class RedisConnection {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  // Called for each reply, in order; error replies are replies too.
  using OnReply = FunctionRef<void(std::size_t index, const redisReply& reply)>;

  // Null, with `status` set, when it cannot connect or log in (an auth status when
  // Redis refused the credentials or asked for some). Connecting (with TLS, the
  // handshake too) is bounded by connect_timeout; logging in, a round trip, also by the
  // deadline of the `caller` who needs the connection.
  static std::unique_ptr<RedisConnection> open(const RedisEndpoint& endpoint,
                                               std::chrono::milliseconds connect_timeout,
                                               std::chrono::milliseconds command_timeout,
                                               Status& status,
                                               Deadline caller = Deadline::max());
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // The commands the next send() writes (empty after each send).
  RespWriter& out() noexcept { return out_; }

  // Writes out() in one go, then reads their replies: one round trip, bounded by
  // `deadline` and command_timeout. A failure means the network or a timeout.
  Status round_trip(OnReply on_reply, Deadline deadline);
  // The same for one command, given as its arguments, with the deadline command_timeout
  // from now.
  Status round_trip(std::initializer_list<std::string_view> command, OnReply on_reply);

  // The two halves of a round trip, so that one caller can have commands in flight on
  // several connections at once (to several Cluster nodes): send() writes out() and
  // empties it, receive() reads `count` replies. Bounded like round_trip.
  Status send(Deadline deadline);
  Status receive(std::size_t count, OnReply on_reply, Deadline deadline);

  // For a subscribed connection, where Redis speaks first: waits up to `wait` for one
  // message (index 0). A timeout status: nothing came, the connection is still good. A
  // message that has started arriving is read to its end within command_timeout.
  Status receive_message(OnReply on_reply, std::chrono::milliseconds wait);

  // False when the server has closed its end (an idle timeout, a restart), or the
  // connection broke: checked without blocking before an idle connection is used again.
  bool alive() const noexcept;
  // Marks the connection to be dropped rather than reused.
  void discard() noexcept { broken_ = true; }
  // The command_timeout from now on.
  void set_command_timeout(std::chrono::milliseconds timeout) noexcept {
    command_timeout_ = timeout;
  }
  bool broken() const noexcept { return broken_; }

 private:
  RedisConnection(std::unique_ptr<Transport> transport, std::chrono::milliseconds command_timeout);
  // The deadline of a call: `deadline`, or command_timeout from now if sooner.
  Deadline bounded(Deadline deadline) const noexcept;
  // A failure: the connection is broken from now on.
  Status fail(Status status) noexcept;

  std::unique_ptr<Transport> transport_;
  std::chrono::milliseconds command_timeout_;
  RespWriter out_;
  RespReader in_;
  bool broken_ = false;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
