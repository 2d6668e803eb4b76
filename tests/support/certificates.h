// Certificates for the TLS tests and benchmarks, made when a run starts (by
// tests/support/make_certs.sh and the openssl command) in a private directory, removed
// at the end.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "redis_server.h"

namespace ratewin::test {

class Certificates {
 public:
  // Throws std::runtime_error if they cannot be made.
  Certificates();
  ~Certificates();
  Certificates(const Certificates&) = delete;
  Certificates& operator=(const Certificates&) = delete;

  // A file of make_certs.sh's: "ca.crt", "server.key", "client.crt", "expired.crt",
  // "other-ca.crt", ...
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A server with the certificate `name` ("server", "expired", "other": name.crt and
  // name.key), trusting ca.crt for client certificates, requiring one if `auth_clients`.
  ServerTls server(bool auth_clients = false, const std::string& name = "server") const {
    return {path(name + ".crt"), path(name + ".key"), path("ca.crt"), auth_clients};
  }

 private:
  std::filesystem::path dir_;
};

// The process's certificates, made on first use (and removed at exit).
Certificates& certificates();

// A test redis-server that an engine reaches over plain TCP or over TLS: the tests of
// outages and deadlines run both ways.
struct Served {
  std::unique_ptr<RedisServer> server;
  bool tls = false;
  // The URL an engine uses: redis://, or rediss:// to the TLS port trusting the test CA.
  std::string url() const;
};
Served serve(bool tls, std::vector<std::string> extra_args = {});

}  // namespace ratewin::test
