#include "ratewin_internal/redis_client.h"

#include <hiredis/hiredis.h>

#include "redis/connection.h"
#include "redis/endpoint.h"

namespace ratewin::inline v1::internal {
namespace {

RedisReply copy(const redisReply& r) {
  RedisReply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r.integer;
      return out;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r.elements);
      for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(copy(*r.element[i]));
      return out;
    default:
      return out;  // nil
  }
  out.text.assign(r.str, r.len);
  return out;
}

}  // namespace

RedisClient::RedisClient(std::unique_ptr<detail::RedisConnection> connection)
    : connection_(std::move(connection)) {}

RedisClient::~RedisClient() = default;

std::unique_ptr<RedisClient> RedisClient::open(std::string_view url,
                                               std::chrono::milliseconds connect_timeout,
                                               std::chrono::milliseconds command_timeout,
                                               std::string& error) {
  const detail::RedisAddress address = detail::RedisAddress::parse(url);
  if (address.kind != detail::RedisAddress::Kind::kSingle) {
    error = "a client of one server needs a redis:// or unix:// address, not " +
            address.describe();
    return nullptr;
  }
  const detail::RedisEndpoint& endpoint = address.login;
  auto connection =
      detail::RedisConnection::open(endpoint, connect_timeout, command_timeout, error);
  if (connection == nullptr) return nullptr;
  return std::unique_ptr<RedisClient>(new RedisClient(std::move(connection)));
}

bool RedisClient::run(std::span<const Argv> commands, std::vector<RedisReply>& replies,
                      std::chrono::milliseconds timeout, std::string& error) {
  replies.clear();
  return connection_->round_trip(
      commands, [&](std::size_t, const redisReply& r) { replies.push_back(copy(r)); },
      std::chrono::steady_clock::now() + timeout, error);
}

RedisClient::Received RedisClient::receive(RedisReply& message, std::chrono::milliseconds wait,
                                           std::string& error) {
  switch (connection_->receive([&](std::size_t, const redisReply& r) { message = copy(r); }, wait,
                               error)) {
    case detail::RedisConnection::Received::kMessage:
      return Received::kMessage;
    case detail::RedisConnection::Received::kIdle:
      return Received::kIdle;
    default:
      return Received::kFailed;
  }
}

bool RedisClient::usable() const noexcept { return !connection_->broken() && connection_->alive(); }

std::string RedisClient::describe(std::string_view url) {
  return detail::RedisAddress::parse(url).describe();
}

}  // namespace ratewin::inline v1::internal
