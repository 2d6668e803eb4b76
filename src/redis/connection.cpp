#include "redis/connection.h"

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace ratewin::inline v1::detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr std::size_t kReadChunk = std::size_t{16} * 1024;

}  // namespace

RedisConnection::RedisConnection(std::unique_ptr<Transport> transport,
                                 milliseconds command_timeout)
    : transport_(std::move(transport)), command_timeout_(command_timeout) {}

RedisConnection::~RedisConnection() = default;

std::unique_ptr<RedisConnection> RedisConnection::open(const RedisEndpoint& endpoint,
                                                       milliseconds connect_timeout,
                                                       milliseconds command_timeout,
                                                       Status& status) {
  const Deadline deadline = steady_clock::now() + connect_timeout;
  std::unique_ptr<Transport> transport = Transport::open(endpoint, status);
  if (transport == nullptr) return nullptr;
  for (;;) {
    const Io io = transport->handshake(status);
    if (io.result == Io::Result::done) break;
    if (io.result != Io::Result::want_read && io.result != Io::Result::want_write) return nullptr;
    if (const Status waited = Transport::wait(transport->fd(), io.result, deadline); !waited.ok()) {
      status = Status(waited.code() == Status::Code::timeout ? Status::Code::connect : waited.code(),
                      "cannot connect to " + endpoint.describe() + ": " +
                          (waited.code() == Status::Code::timeout
                               ? "timed out after " + std::to_string(connect_timeout.count()) + " ms"
                               : waited.message()));
      return nullptr;
    }
  }
  std::unique_ptr<RedisConnection> connection(
      new RedisConnection(std::move(transport), command_timeout));
  // Log in: AUTH [user] password, SELECT db; one round trip, within what is left of the
  // connect timeout.
  const std::vector<std::vector<std::string>> login = endpoint.login_commands();
  if (login.empty()) return connection;
  for (const auto& command : login) {
    connection->out_.command(command.size());
    for (const std::string& arg : command) connection->out_.arg(arg);
  }
  Status refused;
  const Status sent = connection->round_trip(
      [&](std::size_t i, const redisReply& r) {
        if (r.type != REDIS_REPLY_ERROR || !refused.ok()) return;
        const bool auth = endpoint.authenticates() && i == 0;
        refused = Status(auth ? Status::Code::auth : Status::Code::refused,
                         (auth ? "authentication failed for " : "SELECT failed on ") +
                             endpoint.describe() + ": " + reply_text(r));
      },
      deadline);
  if (!sent.ok()) {
    status = Status(sent.code(), "cannot log in to " + endpoint.describe() + ": " + sent.message());
    return nullptr;
  }
  if (!refused.ok()) {
    status = refused;
    return nullptr;
  }
  return connection;
}

RedisConnection::Deadline RedisConnection::bounded(Deadline deadline) const noexcept {
  return std::min(deadline, steady_clock::now() + command_timeout_);
}

Status RedisConnection::fail(Status status) noexcept {
  broken_ = true;
  return status;
}

bool RedisConnection::alive() const noexcept {
  if (broken_) return false;
  // Redis never speaks first on a connection like this one: anything readable while no
  // command is in flight is the end of the stream (or garbage): either way, not usable.
  pollfd p{transport_->fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

Status RedisConnection::send(Deadline deadline) {
  if (broken_) return Status(Status::Code::io, "connection already broken");
  const Deadline until = bounded(deadline);
  const std::string_view data = out_.bytes();
  std::size_t at = 0;
  Status status;
  while (at < data.size()) {
    const Io io = transport_->write(data.data() + at, data.size() - at, status);
    if (io.result == Io::Result::done) {
      at += io.bytes;
    } else if (io.result == Io::Result::want_read || io.result == Io::Result::want_write) {
      if (Status waited = Transport::wait(transport_->fd(), io.result, until); !waited.ok())
        return fail(std::move(waited));
    } else {
      return fail(std::move(status));
    }
  }
  out_.clear();
  return {};
}

Status RedisConnection::receive(std::size_t count, OnReply on_reply, Deadline deadline) {
  if (broken_) return Status(Status::Code::io, "connection already broken");
  const Deadline until = bounded(deadline);
  char chunk[kReadChunk];
  Status status;
  for (std::size_t i = 0; i < count;) {
    redisReply* reply = nullptr;
    if (Status parsed = in_.next(reply); !parsed.ok()) return fail(std::move(parsed));
    if (reply != nullptr) {
      on_reply(i++, *reply);
      in_.release(reply);
      continue;
    }
    const Io io = transport_->read(chunk, sizeof chunk, status);
    if (io.result == Io::Result::done) {
      if (Status fed = in_.feed(chunk, io.bytes); !fed.ok()) return fail(std::move(fed));
    } else if (io.result == Io::Result::want_read || io.result == Io::Result::want_write) {
      if (Status waited = Transport::wait(transport_->fd(), io.result, until); !waited.ok())
        return fail(std::move(waited));
    } else {
      return fail(std::move(status));
    }
  }
  return {};
}

Status RedisConnection::round_trip(OnReply on_reply, Deadline deadline) {
  const std::size_t count = out_.commands();
  if (Status sent = send(deadline); !sent.ok()) return sent;
  return receive(count, on_reply, deadline);
}

Status RedisConnection::round_trip(std::initializer_list<std::string_view> command,
                                   OnReply on_reply) {
  out_.command(command);
  return round_trip(on_reply, steady_clock::now() + command_timeout_);
}

Status RedisConnection::receive_message(OnReply on_reply, milliseconds wait) {
  if (broken_) return Status(Status::Code::io, "connection already broken");
  // A message may already be buffered (several arrived in one read).
  redisReply* reply = nullptr;
  if (Status parsed = in_.next(reply); !parsed.ok()) return fail(std::move(parsed));
  if (reply != nullptr) {
    on_reply(0, *reply);
    in_.release(reply);
    return {};
  }
  Status waited =
      Transport::wait(transport_->fd(), Io::Result::want_read, steady_clock::now() + wait);
  if (waited.code() == Status::Code::timeout) return waited;  // idle: still good
  if (!waited.ok()) return fail(std::move(waited));
  return receive(1, on_reply, steady_clock::now() + command_timeout_);
}

}  // namespace ratewin::inline v1::detail
