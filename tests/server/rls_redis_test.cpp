// Envoy's rate limit service (rls_service.h) on an engine that shares counts through a
// private Redis: no call waits on Redis (a paused Redis holds no thread), and calls from
// many threads, answered on the engine's I/O thread, admit exactly the limit.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "ratewin/engine.h"
#include "redis_server.h"
#include "rls/rls_service.h"

namespace ratewin::server::rls {
namespace {

struct Setup {
  test::RedisServer redis;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<RateLimitService> service;
  std::string dir = "/tmp/ratewin-rls-redis-test-" + std::to_string(::getpid());

  explicit Setup(std::chrono::milliseconds command_timeout) {
    Options o;
    o.redis = redis.url();
    o.command_timeout = command_timeout;
    o.connect_timeout = std::chrono::seconds(5);  // (not what these cases measure)
    engine = std::make_unique<Engine>(o);
    std::filesystem::create_directories(dir);
    const std::string yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: "
        "300}\n"
        "  - key: small\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    REQUIRE(static_cast<bool>(std::ofstream(dir + "/c.yaml", std::ios::binary) << yaml));
    ServiceOptions options;
    options.folder = dir;
    service =
        std::make_unique<RateLimitService>(*engine, options, [](LogLevel, std::string_view) {});
  }
  ~Setup() { std::filesystem::remove_all(dir); }
};

// A request for one descriptor of one entry; its strings live in `r`'s caller.
Request request(std::string_view key, std::string_view value) {
  Request r;
  r.domain = "d";
  r.descriptors.emplace_back().entries.push_back(Entry{key, value});
  return r;
}

TEST_CASE("no call waits on Redis: decide() returns while a paused Redis holds the write") {
  Setup s(std::chrono::milliseconds(3000));
  // Connections up, and "small" at its limit.
  std::atomic<int> answered{0};
  const auto count = [&](Response&&) { answered.fetch_add(1); };
  REQUIRE(s.service->decide(request("small", "x"), count).ok());
  REQUIRE(test::eventually([&] { return answered.load() == 1; }));
  REQUIRE(test::eventually([&] { return s.engine->stats().store_available; }));
  s.redis.pause();
  std::optional<Response> refused;
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(
      s.service->decide(request("small", "x"), [&](Response&& r) { refused = std::move(r); }).ok());
  // A refusal is answered before decide() returns: from this engine's own counts.
  REQUIRE(refused);
  CHECK(refused->overall_code == Code::over_limit);
  // An admission needs a write: decide() returns at once, the answer comes later.
  std::atomic<bool> done{false};
  const Status admitted = s.service->decide(request("k", "y"), [&](Response&& r) {
    CHECK(r.overall_code == Code::ok);
    done.store(true);
  });
  REQUIRE(admitted.ok());
  CHECK_FALSE(done.load());  // (Redis is paused: nothing can have answered the write)
  // A third of the command timeout: a call that waited on the paused Redis would take all
  // of it, and two calls that do not wait take far less, however busy the machine.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1000));
  s.redis.resume();
  CHECK(test::eventually([&] { return done.load(); }));
}

TEST_CASE("calls from several threads, answered on the I/O thread, admit exactly the limit") {
  Setup s(std::chrono::milliseconds(2000));
  std::atomic<int> ok{0};
  std::atomic<int> over{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        const Status problem = s.service->decide(request("k", "shared"), [&](Response&& r) {
          (r.overall_code == Code::ok ? ok : over).fetch_add(1);
          answered.fetch_add(1);
        });
        CHECK(problem.ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  REQUIRE(test::eventually([&] { return answered.load() == 400; }));
  CHECK(ok.load() == 300);
  CHECK(over.load() == 100);
}

}  // namespace
}  // namespace ratewin::server::rls
