#include "redis_server_c.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "certificates.h"
#include "redis_server.h"

struct ratewin_test_redis {
  std::unique_ptr<ratewin::test::RedisServer> server;
  std::string unix_url;
  std::string tls_url;
};

extern "C" {

ratewin_test_redis* ratewin_test_redis_start(int flags) {
  try {
    using ratewin::test::RedisServer;
    auto out = std::make_unique<ratewin_test_redis>();
    out->server = (flags & RATEWIN_TEST_REDIS_TLS) != 0
                      ? std::make_unique<RedisServer>(std::vector<std::string>{}, "",
                                                      ratewin::test::certificates().server())
                      : std::make_unique<RedisServer>();
    out->unix_url = "unix://" + out->server->socket_path();
    if (out->server->tls_port() != 0) out->tls_url = out->server->tls_url();
    return out.release();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratewin_test_redis_start: %s\n", e.what());
    return nullptr;
  }
}

void ratewin_test_redis_free(ratewin_test_redis* server) { delete server; }

const char* ratewin_test_redis_unix_url(const ratewin_test_redis* server) {
  return server->unix_url.c_str();
}

const char* ratewin_test_redis_tls_url(const ratewin_test_redis* server) {
  return server->tls_url.empty() ? nullptr : server->tls_url.c_str();
}

int ratewin_test_redis_port(const ratewin_test_redis* server) { return server->server->port(); }

int ratewin_test_redis_tls_port(const ratewin_test_redis* server) {
  return server->server->tls_port();
}

int ratewin_test_redis_pause(ratewin_test_redis* server) { return server->server->pause() ? 1 : 0; }

int ratewin_test_redis_resume(ratewin_test_redis* server) {
  return server->server->resume() ? 1 : 0;
}

long long ratewin_test_redis_calls(const ratewin_test_redis* server, const char* command) {
  try {
    return server->server->calls(command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratewin_test_redis_calls: %s\n", e.what());
    return -1;
  }
}

int ratewin_test_certificate(const char* name, char* path, size_t size) {
  try {
    const std::string made = ratewin::test::certificates().path(name);
    if (made.size() >= size) {
      std::fprintf(stderr, "ratewin_test_certificate: %s does not fit in %zu bytes\n", made.c_str(),
                   size);
      return 0;
    }
    made.copy(path, made.size());
    path[made.size()] = '\0';
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ratewin_test_certificate: %s\n", e.what());
    return 0;
  }
}

}  // extern "C"
