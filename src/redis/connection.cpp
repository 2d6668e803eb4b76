#include "redis/connection.h"

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace ratewin {
inline namespace v1 {
namespace detail {
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
                                                       Status& status, Deadline caller) {
  const Deadline deadline = steady_clock::now() + connect_timeout;
  std::unique_ptr<Transport> transport = Transport::open(endpoint, status);
  if (transport == nullptr) return nullptr;
  for (;;) {
    const Io io = transport->handshake(status);
    if (io.result == Io::Result::done) break;
    if (io.result != Io::Result::want_read && io.result != Io::Result::want_write) return nullptr;
    if (const Status waited = Transport::wait(transport->fd(), io.result, deadline); !waited.ok()) {
      status = waited.code() == Status::Code::timeout
                   ? connect_timed_out(transport.get(), endpoint.describe(), connect_timeout)
                   : Status(waited.code(),
                            "cannot connect to " + endpoint.describe() + ": " + waited.message());
      return nullptr;
    }
  }
  std::unique_ptr<RedisConnection> connection(
      new RedisConnection(std::move(transport), command_timeout));
  // Log in: AUTH [user] password, SELECT db, PING; one round trip, within what is left
  // of the connect timeout and the caller's deadline. (The PING makes a server that does not speak this protocol,
  // such as a TLS port reached without TLS, fail here rather than at the first command.)
  std::vector<std::vector<std::string>> login = endpoint.login_commands();
  login.push_back({"PING"});
  for (const auto& command : login) {
    connection->out_.command(command.size());
    for (const std::string& arg : command) connection->out_.arg(arg);
  }
  Status refused;
  const Status sent = connection->round_trip(
      [&](std::size_t i, const redisReply& r) {
        if (r.type != REDIS_REPLY_ERROR || !refused.ok()) return;
        // AUTH refused, or a command refused for want of it: credentials; else as Redis said.
        const Status said = Status::of_error_reply(reply_text(r));
        const bool auth = said.code() == Status::Code::auth || login[i].front() == "AUTH";
        refused = Status(auth ? Status::Code::auth : said.code(),
                         (auth ? "authentication failed for " : login[i].front() + " failed on ") +
                             endpoint.describe() + ": " + reply_text(r));
      },
      std::min(deadline, caller));
  if (!sent.ok()) {
    status = Status(sent.code(), "cannot log in to " + endpoint.describe() + ": " +
                                     sent.message() + login_failure_hint(endpoint, sent));
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

bool RedisConnection::alive() const noexcept { return !broken_ && transport_->idle_alive(); }

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
  const Deadline until = steady_clock::now() + wait;
  char chunk[kReadChunk];
  for (;;) {
    if (!transport_->buffered()) {
      Status waited = Transport::wait(transport_->fd(), Io::Result::want_read, until);
      if (waited.code() == Status::Code::timeout) return waited;  // idle: still good
      if (!waited.ok()) return fail(std::move(waited));
    }
    Status status;
    const Io io = transport_->read(chunk, sizeof chunk, status);
    if (io.result == Io::Result::done) {
      if (Status fed = in_.feed(chunk, io.bytes); !fed.ok()) return fail(std::move(fed));
      return receive(1, on_reply, steady_clock::now() + command_timeout_);
    }
    // (Readable, but no data: TLS records of its own, such as a session ticket.)
    if (io.result != Io::Result::want_read && io.result != Io::Result::want_write)
      return fail(std::move(status));
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
