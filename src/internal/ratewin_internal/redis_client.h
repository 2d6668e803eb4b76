// ratewin's own tools' way to talk to Redis (the server's overrides and their pub/sub,
// the Python module's address check): a blocking client over the library's connections.
// Part of the internal target ratewin::internal: not installed, no stability promise.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ratewin/engine.h"
#include "ratewin_internal/outcome.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
class RedisConnection;
struct RedisAddress;
}  // namespace detail

namespace internal {

// A reply, copied out of the connection's buffers.
struct RedisReply {
  enum class Type { kString, kStatus, kError, kInteger, kNil, kArray };
  Type type = Type::kNil;
  std::string text;  // string, status or error
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_error() const noexcept { return type == Type::kError; }
};

// Where RedisClients connect: an address (any form Options::redis takes) with its TLS
// settings (Options::tls), checked, and certificates loaded, once; its clients share
// them (and resume TLS sessions). Empty: no address. Cheap to copy.
class RedisTarget {
 public:
  RedisTarget() = default;
  // Throws std::invalid_argument for an address or TLS settings it cannot use.
  explicit RedisTarget(std::string_view url, const TlsOptions& tls = {});
  bool empty() const noexcept { return address_ == nullptr; }
  // The address without its passwords, for messages.
  std::string describe() const;

 private:
  friend class RedisClient;
  std::shared_ptr<const detail::RedisAddress> address_;
};

// One blocking connection to a server of an address (a RedisTarget), logged in. Not
// thread-safe: one thread at a time.
class RedisClient {
 public:
  using Argv = std::vector<std::string_view>;

  // A connection to the server that serves `route_key`: for a Cluster address, the
  // primary of the key's slot (any node without a key: a PUBLISH reaches every node, and
  // a subscriber may listen on any); for a Sentinel address, the current primary. A
  // MOVED or READONLY reply later means the key moved: open another. The failure when it
  // cannot connect or log in (or `target` is empty).
  static Result<std::unique_ptr<RedisClient>> open(const RedisTarget& target,
                                                   std::chrono::milliseconds connect_timeout,
                                                   std::chrono::milliseconds command_timeout,
                                                   std::string_view route_key = {});
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // The commands in one round trip, their replies in order (error replies included),
  // within `timeout` (whatever command timeout it was opened with; receive() then reads
  // the rest of a message within it too). The failure on a network failure or timeout;
  // the client is then broken().
  Status run(std::span<const Argv> commands, std::vector<RedisReply>& replies,
             std::chrono::milliseconds timeout);
  // For a subscribed connection: waits up to `wait` for one message. Ok with a message;
  // Code::timeout when none came in time; another failure when the connection failed.
  Status receive(RedisReply& message, std::chrono::milliseconds wait);
  // False once a failure broke it, or when the server closed its end.
  bool usable() const noexcept;

  // The address (any form Options::redis takes) without its passwords, for messages;
  // throws std::invalid_argument for an address it cannot parse.
  static std::string describe(std::string_view url);

 private:
  explicit RedisClient(std::unique_ptr<detail::RedisConnection> connection);
  std::unique_ptr<detail::RedisConnection> connection_;
};

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
