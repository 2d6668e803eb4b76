#include "redis/sentinel.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "redis/connection.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

SentinelWatch::SentinelWatch(RedisAddress address, std::chrono::milliseconds connect_timeout,
                             std::chrono::milliseconds command_timeout, Reporter& reporter,
                             std::function<void(const Primary&)> found)
    : address_(std::move(address)),
      connect_timeout_(connect_timeout),
      command_timeout_(command_timeout),
      reporter_(reporter),
      found_(std::move(found)) {}

SentinelWatch::~SentinelWatch() { stop(); }

SentinelWatch::Primary SentinelWatch::resolve(Status& status) {
  const std::size_t count = address_.servers.size();
  const auto failed = [&](Status::Code code, const std::string& why) { status = Status(code, why); };
  for (std::size_t tried = 0; tried < count && !stopping(); ++tried) {
    const RedisEndpoint& sentinel = address_.servers[(next_sentinel_ + tried) % count];
    const std::string named = "sentinel " + sentinel.describe();
    Status why;
    auto connection = RedisConnection::open(sentinel, connect_timeout_, command_timeout_, why);
    if (connection == nullptr) {
      status = why.within(named);
      continue;
    }
    Primary primary;
    std::string refused;
    why = connection->round_trip(
        {"SENTINEL", "get-master-addr-by-name", address_.master_name},
        [&](std::size_t, const redisReply& r) {
          if (r.type == REDIS_REPLY_ARRAY && r.elements == 2 &&
              r.element[0]->type == REDIS_REPLY_STRING &&
              r.element[1]->type == REDIS_REPLY_STRING) {
            primary.host.assign(r.element[0]->str, r.element[0]->len);
            const std::string_view port(r.element[1]->str, r.element[1]->len);
            std::from_chars(port.data(), port.data() + port.size(), primary.port);
          } else if (r.type == REDIS_REPLY_NIL) {
            refused = "knows no primary named '" + address_.master_name + "'";
          } else {
            refused = reply_text(r);
          }
        });
    if (!why.ok()) {
      status = why.within(named);
      continue;
    }
    if (primary.host.empty() || primary.port <= 0) {
      std::string why_refused = named;
      why_refused.append(": ").append(refused);
      failed(Status::Code::refused, why_refused);
      continue;
    }
    // The sentinel's word, checked with the primary itself: it must say it is one.
    const RedisEndpoint endpoint = address_.node(primary.host, primary.port);
    auto data = RedisConnection::open(endpoint, connect_timeout_, command_timeout_, why);
    if (data == nullptr) {
      status = why.within("the primary " + endpoint.describe() + " that " + named + " named");
      continue;
    }
    std::string role;
    why = data->round_trip({"ROLE"}, [&](std::size_t, const redisReply& r) {
      role = r.type == REDIS_REPLY_ARRAY && r.elements > 0 &&
                     r.element[0]->type == REDIS_REPLY_STRING
                 ? std::string(r.element[0]->str, r.element[0]->len)
                 : reply_text(r);
    });
    if (!why.ok()) {
      status = why.within("the primary " + endpoint.describe());
      continue;
    }
    if (role != "master") {
      std::string mismatch = named;
      mismatch.append(" named ")
          .append(endpoint.describe())
          .append(" as the primary, but it says it is a ")
          .append(role);
      failed(Status::Code::unavailable, mismatch);
      continue;
    }
    next_sentinel_ = (next_sentinel_ + tried) % count;  // keep asking the one that knew
    return primary;
  }
  if (status.ok()) failed(Status::Code::connect, "no sentinel answered");
  return {};
}

void SentinelWatch::start() {
  thread_ = std::thread([this] { run(); });
}

void SentinelWatch::ask() {
  asked_.store(true, std::memory_order_release);
  std::lock_guard lock(mutex_);
  wake_.notify_all();
}

void SentinelWatch::stop() {
  stop_.store(true, std::memory_order_release);
  {
    std::lock_guard lock(mutex_);
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void SentinelWatch::run() {
  auto backoff = std::chrono::milliseconds(100);
  while (!stopping()) {
    asked_.store(false, std::memory_order_release);
    Status status;
    const Primary primary = resolve(status);
    if (!primary.host.empty() && !(primary == last_)) {
      last_ = primary;
      found_(primary);
    }
    if (primary.host.empty()) reporter_.note_error("finding the primary: " + status.message());
    // Subscribed on a sentinel until something happens: a switch is announced at once.
    // Without a primary, only briefly (the sentinels may not have noticed a failure yet).
    const RedisEndpoint& sentinel = address_.servers[next_sentinel_];
    Status why;
    auto connection = RedisConnection::open(sentinel, connect_timeout_, command_timeout_, why);
    if (connection != nullptr &&
        watch(*connection, primary.host.empty() ? std::chrono::milliseconds(250)
                                                : std::chrono::milliseconds(10'000))) {
      backoff = std::chrono::milliseconds(100);
      continue;
    }
    if (connection == nullptr) {
      reporter_.note_error("sentinel " + sentinel.describe() + ": " + why.message());
      next_sentinel_ = (next_sentinel_ + 1) % address_.servers.size();
    }
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, backoff,
                   [this] { return stopping() || asked_.load(std::memory_order_acquire); });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

bool SentinelWatch::watch(RedisConnection& sentinel, std::chrono::milliseconds at_most) {
  bool subscribed = false;
  if (!sentinel
           .round_trip({"SUBSCRIBE", "+switch-master"},
                       [&](std::size_t, const redisReply& r) { subscribed = r.type == REDIS_REPLY_ARRAY; })
           .ok() ||
      !subscribed) {
    return false;
  }
  const auto until = std::chrono::steady_clock::now() + at_most;
  while (!stopping() && !asked_.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < until) {
    bool switched = false;
    const Status got = sentinel.receive_message(
        [&](std::size_t, const redisReply& r) {
          // ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
          if (r.type == REDIS_REPLY_ARRAY && r.elements == 3 &&
              r.element[2]->type == REDIS_REPLY_STRING) {
            const std::string_view text(r.element[2]->str, r.element[2]->len);
            switched = text.starts_with(address_.master_name + " ");
          }
        },
        std::chrono::milliseconds(100));
    if (!got.ok() && got.code() != Status::Code::timeout) return false;
    if (switched) return true;
  }
  return true;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
