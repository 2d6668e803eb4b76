#include "redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

namespace ratewin::inline v1::detail {
namespace {

timeval to_timeval(std::chrono::milliseconds d) {
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

std::unique_ptr<RedisConnection> RedisConnection::open(const RedisEndpoint& endpoint,
                                                       std::chrono::milliseconds connect_timeout,
                                                       std::chrono::milliseconds command_timeout,
                                                       std::string& error) {
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
  std::unique_ptr<RedisConnection> connection(new RedisConnection(c));
  // Log in: AUTH [user] password, SELECT db; one round trip.
  std::vector<Argv> hello;
  if (!endpoint.password.empty()) {
    if (endpoint.user.empty()) {
      hello.push_back({"AUTH", endpoint.password});
    } else {
      hello.push_back({"AUTH", endpoint.user, endpoint.password});
    }
  }
  const std::string db = std::to_string(endpoint.db);
  if (endpoint.db != 0) hello.push_back({"SELECT", db});
  if (hello.empty()) return connection;
  std::string refused;
  const bool ok = connection->round_trip(
      hello,
      [&](std::size_t i, const redisReply& r) {
        if (r.type == REDIS_REPLY_ERROR && refused.empty()) {
          const bool auth = !endpoint.password.empty() && i == 0;
          refused = (auth ? "authentication failed for " : "SELECT failed on ") +
                    endpoint.describe() + ": " + reply_text(r);
        }
      },
      error);
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

bool RedisConnection::round_trip(std::span<const Argv> commands, const ReplyFn& on_reply,
                                 std::string& error) {
  if (broken_) {
    error = "connection already broken";
    return false;
  }
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
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      broken_ = true;
      // A socket timeout reads as EAGAIN: say so plainly.
      error = (context_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK))
                  ? "timed out"
                  : std::string(context_->errstr[0] != '\0' ? context_->errstr : "connection lost");
      return false;
    }
    auto* reply = static_cast<redisReply*>(raw);
    on_reply(i, *reply);
    freeReplyObject(reply);
  }
  return true;
}

}  // namespace ratewin::inline v1::detail
