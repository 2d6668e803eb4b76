// grpc_front.h: ratewin-server's gRPC listener (--grpc-listen): Envoy's rate limit
// service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over
// rls::RateLimitService, and grpc.health.v1.Health. Built with RATEWIN_BUILD_GRPC
// (rls/grpc_front.cpp); without it, start() says the server was built without gRPC.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rls/rls_service.h"

namespace ratewin::server {

class GrpcFront {
 public:
  // Whether this build has gRPC.
  static bool available() noexcept;
  // Serves on `address` (host:port; port 0 picks a free one), polling its calls on
  // `threads` threads of its own (a call waiting on Redis holds none of them). Throws
  // std::runtime_error when it cannot.
  static std::unique_ptr<GrpcFront> start(rls::RateLimitService& service,
                                          const std::string& address, unsigned threads);
  virtual ~GrpcFront() = default;
  virtual int port() const = 0;
  // From now on health checks answer NOT_SERVING (the server is draining).
  virtual void draining() = 0;
  // Waits up to `timeout` for the calls in flight, cancels what remains, and stops.
  virtual void stop(std::chrono::milliseconds timeout) = 0;
};

}  // namespace ratewin::server
