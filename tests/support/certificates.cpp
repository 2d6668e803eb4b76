#include "certificates.h"

#include <unistd.h>

#include <stdexcept>

#include "redis_cluster.h"

namespace ratewin::test {

Certificates::Certificates() {
  static int made = 0;
  dir_ = std::filesystem::temp_directory_path() /
         ("ratewin-certs-" + std::to_string(::getpid()) + "-" + std::to_string(++made));
  std::string output;
  if (run_program({RATEWIN_MAKE_CERTS, dir_.string()}, output, 60'000) != 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw std::runtime_error("cannot make the test certificates: " + output);
  }
}

Certificates::~Certificates() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

Certificates& certificates() {
  static Certificates made;
  return made;
}

std::string Served::url() const {
  return tls ? server->tls_url() + "?tls_ca_file=" + certificates().path("ca.crt") : server->url();
}

Served serve(bool tls, std::vector<std::string> extra_args) {
  Served out;
  out.tls = tls;
  out.server = tls ? std::make_unique<RedisServer>(std::move(extra_args), "", certificates().server())
                   : std::make_unique<RedisServer>(std::move(extra_args));
  return out;
}

}  // namespace ratewin::test
