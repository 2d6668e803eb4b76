// rls_calls.h in a build without gRPC (RATEWIN_BUILD_GRPC off: no protobuf).
#include <stdexcept>

#include "rls/rls_calls.h"

namespace ratewin::server {

bool rls_calls_available() noexcept { return false; }

std::unique_ptr<GrpcHandler> make_rls_calls(rls::RateLimitService&, Engine&, uv_loop_s*) {
  throw std::runtime_error(
      "--grpc-listen: this ratewin-server was built without gRPC (RATEWIN_BUILD_GRPC=OFF; on "
      "Debian, install libprotobuf-dev and protobuf-compiler and build again)");
}

}  // namespace ratewin::server
