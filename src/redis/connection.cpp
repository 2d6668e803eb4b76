#include "redis/connection.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>

#include "redis/sigpipe.h"

namespace ratewin::inline v1::detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

timeval to_timeval(milliseconds d) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(d.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
  return tv;
}

}  // namespace

std::string reply_text(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR || reply.type == REDIS_REPLY_STATUS ||
      reply.type == REDIS_REPLY_STRING) {
    return std::string(reply.str, reply.len);
  }
  if (reply.type == REDIS_REPLY_INTEGER) return std::to_string(reply.integer);
  if (reply.type == REDIS_REPLY_NIL) return "(nil)";
  return "(array of " + std::to_string(reply.elements) + ")";
}

bool server_unavailable(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR) return false;
  const std::string_view text(reply.str, reply.len);
  for (const std::string_view prefix : {"READONLY", "LOADING", "MASTERDOWN", "BUSY ", "CLUSTERDOWN"}) {
    if (text.starts_with(prefix)) return true;
  }
  return false;
}

std::unique_ptr<RedisConnection> RedisConnection::open(const RedisEndpoint& endpoint,
                                                       milliseconds connect_timeout,
                                                       milliseconds command_timeout,
                                                       std::string& error) {
  const steady_clock::time_point deadline = steady_clock::now() + connect_timeout;
  redisContext* c =
      endpoint.unix_path.empty()
          ? redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port,
                                    to_timeval(connect_timeout))
          : redisConnectUnixWithTimeout(endpoint.unix_path.c_str(), to_timeval(connect_timeout));
  if (c == nullptr) {
    error = "cannot allocate a Redis context";
    return nullptr;
  }
  if (c->err != 0) {
    error = "cannot connect to " + endpoint.describe() + ": " + c->errstr;
    redisFree(c);
    return nullptr;
  }
  if (redisSetTimeout(c, to_timeval(command_timeout)) != REDIS_OK) {
    error = "cannot set the socket timeouts: " + std::string(c->errstr);
    redisFree(c);
    return nullptr;
  }
  std::unique_ptr<RedisConnection> connection(new RedisConnection(c, command_timeout));
  // Log in: AUTH [user] password, SELECT db; one round trip, within what is left of the
  // connect timeout.
  const auto login = endpoint.login_commands();
  if (login.empty()) return connection;
  std::vector<Argv> hello;
  hello.reserve(login.size());
  for (const auto& command : login) hello.emplace_back(command.begin(), command.end());
  std::string refused;
  const bool ok = connection->round_trip(
      hello,
      [&](std::size_t i, const redisReply& r) {
        if (r.type == REDIS_REPLY_ERROR && refused.empty()) {
          const bool auth = endpoint.authenticates() && i == 0;
          refused = (auth ? "authentication failed for " : "SELECT failed on ") +
                    endpoint.describe() + ": " + reply_text(r);
        }
      },
      deadline, error);
  if (!ok) {
    error = "cannot log in to " + endpoint.describe() + ": " + error;
    return nullptr;
  }
  if (!refused.empty()) {
    error = refused;
    return nullptr;
  }
  return connection;
}

RedisConnection::~RedisConnection() { redisFree(context_); }

bool RedisConnection::alive() const noexcept {
  if (broken_) return false;
  // Redis never speaks first on a connection like this one: anything readable while no
  // command is in flight is the end of the stream (or garbage): either way, not usable.
  pollfd p{context_->fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, 0);
  return ready == 0;
}

RedisConnection::Received RedisConnection::receive(const ReplyFn& on_reply,
                                                   std::chrono::milliseconds wait,
                                                   std::string& error) {
  if (broken_) {
    error = "connection already broken";
    return Received::kFailed;
  }
  void* raw = nullptr;
  // A message may already be buffered (several arrived in one read).
  if (redisGetReplyFromReader(context_, &raw) != REDIS_OK) {
    broken_ = true;
    error = context_->errstr;
    return Received::kFailed;
  }
  if (raw == nullptr) {
    pollfd p{context_->fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(wait.count()));
    if (ready == 0) return Received::kIdle;
    if (ready < 0 && errno == EINTR) return Received::kIdle;
    std::string ignored;
    if (!bound_by(steady_clock::now() + command_timeout_, ignored) ||
        redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      broken_ = true;
      error = context_->errstr[0] != '\0' ? context_->errstr : "connection lost";
      return Received::kFailed;
    }
  }
  auto* reply = static_cast<redisReply*>(raw);
  on_reply(0, *reply);
  freeReplyObject(reply);
  return Received::kMessage;
}

bool RedisConnection::bound_by(Deadline deadline, std::string& error) {
  const auto left = deadline - steady_clock::now();
  if (left <= steady_clock::duration::zero()) {
    error = "timed out";
    return false;
  }
  // Whole milliseconds, rounded up; the socket keeps command_timeout unless less is left.
  milliseconds want = std::chrono::ceil<milliseconds>(left);
  if (want > command_timeout_) want = command_timeout_;
  if (want != socket_timeout_) {
    if (redisSetTimeout(context_, to_timeval(want)) != REDIS_OK) {
      broken_ = true;
      error = "cannot set the socket timeouts: " + std::string(context_->errstr);
      return false;
    }
    socket_timeout_ = want;
  }
  return true;
}

bool RedisConnection::send(std::span<const Argv> commands, Deadline deadline, std::string& error) {
  if (broken_) {
    error = "connection already broken";
    return false;
  }
  if (!bound_by(deadline, error)) return false;
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const Argv& command : commands) {
    argv.clear();
    lengths.clear();
    for (const std::string_view arg : command) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                               lengths.data()) != REDIS_OK) {
      broken_ = true;
      error = context_->errstr;
      return false;
    }
  }
  const SigpipeBlock no_sigpipe;
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(context_, &done) != REDIS_OK) {
      broken_ = true;
      error = failure_text();
      return false;
    }
  }
  return true;
}

bool RedisConnection::receive(std::size_t count, const ReplyFn& on_reply, Deadline deadline,
                              std::string& error) {
  if (broken_) {
    error = "connection already broken";
    return false;
  }
  if (!bound_by(deadline, error)) return false;
  const SigpipeBlock no_sigpipe;  // redisGetReply writes what is still buffered
  for (std::size_t i = 0; i < count; ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      broken_ = true;
      error = failure_text();
      return false;
    }
    auto* reply = static_cast<redisReply*>(raw);
    on_reply(i, *reply);
    freeReplyObject(reply);
  }
  return true;
}

std::string RedisConnection::failure_text() const {
  // A socket timeout reads as EAGAIN: say so plainly.
  if (context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return "timed out";
  }
  return context_->errstr[0] != '\0' ? context_->errstr : "connection lost";
}

bool RedisConnection::round_trip(std::span<const Argv> commands, const ReplyFn& on_reply,
                                 Deadline deadline, std::string& error) {
  return send(commands, deadline, error) && receive(commands.size(), on_reply, deadline, error);
}

}  // namespace ratewin::inline v1::detail
