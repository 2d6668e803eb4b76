// GrpcFront in a build without gRPC (RATEWIN_BUILD_GRPC off).
#include <stdexcept>

#include "rls/grpc_front.h"

namespace ratewin::server {

bool GrpcFront::available() noexcept { return false; }

std::unique_ptr<GrpcFront> GrpcFront::start(rls::RateLimitService&, const std::string&, unsigned) {
  throw std::runtime_error(
      "--grpc-listen: this ratewin-server was built without gRPC (RATEWIN_BUILD_GRPC=OFF; on "
      "Debian, install libgrpc++-dev and protobuf-compiler-grpc and build again)");
}

}  // namespace ratewin::server
