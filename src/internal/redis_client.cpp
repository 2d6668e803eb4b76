#include "ratewin_internal/redis_client.h"

#include <hiredis/hiredis.h>

#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/reporter.h"
#include "redis/sentinel.h"
#include "redis/slot.h"
#include "redis/tls.h"
#include "redis/topology.h"

namespace ratewin {
inline namespace v1 {
namespace internal {
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

// The server to connect to for `route_key`: the address itself; on a Cluster, the primary
// serving the key's slot (read from the first seed that gives the slot map; any node that
// answers when there is no key); under Sentinel, the primary the sentinels name. Why
// not, if none can be found.
Result<detail::RedisEndpoint> server_for(const detail::RedisAddress& address,
                                         std::string_view route_key,
                                         std::chrono::milliseconds connect_timeout,
                                         std::chrono::milliseconds command_timeout) {
  Status status;
  using Kind = detail::RedisAddress::Kind;
  detail::Reporter reporter(nullptr, address.describe());
  if (address.kind == Kind::kSingle) return address.login;
  if (address.kind == Kind::kSentinel) {
    detail::SentinelWatch sentinels(address, connect_timeout, command_timeout, reporter, nullptr);
    const detail::SentinelWatch::Primary primary = sentinels.resolve(status);
    if (primary.host.empty()) return status;
    return address.node(primary.host, primary.port);
  }
  if (route_key.empty()) return address.servers.front();  // any node: the caller tries it
  Options options;
  options.connect_timeout = connect_timeout;
  options.command_timeout = command_timeout;
  detail::Topology topology(address, options, reporter, nullptr);
  // (The last seed's failure, when none gives the map.)
  Status failure(Status::Code::connect, "no seed");
  for (const detail::RedisEndpoint& seed : address.servers) {
    auto connection = detail::RedisConnection::open(seed, connect_timeout, command_timeout, status);
    if (connection == nullptr) {
      failure = status;
      continue;
    }
    Status mapped(Status::Code::protocol, "no reply");
    status = connection->round_trip({"CLUSTER", "SLOTS"}, [&](std::size_t, const redisReply& r) {
      mapped = topology.apply_cluster_slots(r, seed.host);
    });
    if (!status.ok() || !mapped.ok()) {
      failure = status.ok() ? mapped : status;
      continue;
    }
    return topology.node_for_slot(detail::key_slot(route_key)).endpoint();
  }
  return failure;
}

}  // namespace

RedisClient::RedisClient(std::unique_ptr<detail::RedisConnection> connection)
    : connection_(std::move(connection)) {}

RedisClient::~RedisClient() = default;

RedisTarget::RedisTarget(std::string_view url, const TlsOptions& tls)
    : address_(std::make_shared<const detail::RedisAddress>(
          detail::secured(detail::RedisAddress::parse(url), tls, nullptr))) {}

std::string RedisTarget::describe() const { return address_ ? address_->describe() : std::string(); }

Result<std::unique_ptr<RedisClient>> RedisClient::open(const RedisTarget& target,
                                                       std::chrono::milliseconds connect_timeout,
                                                       std::chrono::milliseconds command_timeout,
                                                       std::string_view route_key) {
  if (target.empty()) return Status(Status::Code::invalid, "no Redis address");
  const detail::RedisAddress& address = *target.address_;
  const bool any_node = address.kind == detail::RedisAddress::Kind::kCluster && route_key.empty();
  // On a Cluster with no key, any node will do: the first seed that answers.
  const std::size_t tries = any_node ? address.servers.size() : 1;
  Status status;
  for (std::size_t i = 0; i < tries; ++i) {
    detail::RedisEndpoint endpoint;
    if (any_node) {
      endpoint = address.servers[i];
    } else if (Result<detail::RedisEndpoint> found =
                   server_for(address, route_key, connect_timeout, command_timeout)) {
      endpoint = *std::move(found);
    } else {
      return found.status();
    }
    auto connection =
        detail::RedisConnection::open(endpoint, connect_timeout, command_timeout, status);
    if (connection != nullptr) {
      return std::unique_ptr<RedisClient>(new RedisClient(std::move(connection)));
    }
  }
  return status;
}

Status RedisClient::run(std::span<const Argv> commands, std::vector<RedisReply>& replies,
                        std::chrono::milliseconds timeout) {
  replies.clear();
  // Bounded by `timeout` alone, not by the command timeout the connection was opened with
  // (a connection kept for later work outlives what it was opened for).
  connection_->set_command_timeout(timeout);
  for (const Argv& command : commands) connection_->out().command(command);
  return connection_->round_trip(
      [&](std::size_t, const redisReply& r) { replies.push_back(copy(r)); },
      std::chrono::steady_clock::now() + timeout);
}

Status RedisClient::receive(RedisReply& message, std::chrono::milliseconds wait) {
  return connection_->receive_message([&](std::size_t, const redisReply& r) { message = copy(r); },
                                      wait);
}

bool RedisClient::usable() const noexcept { return !connection_->broken() && connection_->alive(); }

std::string RedisClient::describe(std::string_view url) {
  return detail::RedisAddress::parse(url).describe();
}

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
