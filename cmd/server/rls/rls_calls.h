// rls_calls.h: the gRPC calls ratewin-server answers on --grpc-listen, for one loop (a
// GrpcHandler, http/grpc_session.h): Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), its messages translated
// by protobuf to and from rls::RateLimitService's, and grpc.health.v1.Health (Check, and
// Watch: its streams kept here, told when the server drains).
// Built with RATEWIN_BUILD_GRPC (rls/rls_calls.cpp, protobuf); without it,
// rls_calls_available() is false and the server refuses --grpc-listen.
#pragma once

#include <memory>

#include "http/grpc_session.h"
#include "ratewin/engine.h"
#include "rls/rls_service.h"

struct uv_loop_s;

namespace ratewin::server {

// Whether this build serves gRPC.
bool rls_calls_available() noexcept;

// One loop's calls. With `loop` and a store, a call's admissions are written from that
// loop (its own AsyncAcquirer) and answered when their replies arrive there; without,
// decided at once. `service` and `engine` must outlive it.
std::unique_ptr<GrpcHandler> make_rls_calls(rls::RateLimitService& service, Engine& engine,
                                            uv_loop_s* loop);

}  // namespace ratewin::server
