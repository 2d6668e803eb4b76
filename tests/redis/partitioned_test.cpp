// FailurePolicy::partitioned against a real redis-server: engines on one key prefix count
// each other live through their heartbeats (a node that stops drops out), and while Redis
// is away (killed or paused) each admits its share of the limit, never waiting past its
// deadline, and the whole limit again once Redis is back.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "certificates.h"
#include "deadlines.h"
#include "eventually.h"
#include "ratewin/engine.h"
#include "redis_server.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;

Options options_for(const std::string& url, const std::string& prefix) {
  Options o;
  o.redis = url;
  o.key_prefix = prefix;
  o.connect_timeout = kDeadline;  // (long against a busy machine's delays: deadlines.h)
  o.command_timeout = kDeadline;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

std::vector<std::unique_ptr<Engine>> engines_on(const std::string& url, const std::string& prefix,
                                                int count) {
  std::vector<std::unique_ptr<Engine>> out;
  for (int i = 0; i < count; ++i) out.push_back(std::make_unique<Engine>(options_for(url, prefix)));
  return out;
}

bool all_see(const std::vector<std::unique_ptr<Engine>>& engines, std::uint64_t live) {
  for (const auto& e : engines)
    if (e->stats().live_nodes != live) return false;
  return true;
}

TEST_CASE("engines on one prefix count each other live, and a stopped one drops out") {
  RedisServer redis;
  REQUIRE(redis.start());
  auto engines = engines_on(redis.url(), "live", 3);
  auto other = engines_on(redis.url(), "other", 1);  // another prefix: counted apart
  CHECK(eventually([&] { return all_see(engines, 3); }));
  CHECK(eventually([&] { return all_see(other, 1); }));
  // It drops out once silent for 3 s, and the others lower their count once that has
  // lasted 3 s more.
  engines.pop_back();
  CHECK(eventually([&] { return all_see(engines, 2); }));
}

// Each engine alone in a window of a fresh resource, while Redis is away: its share. Over
// plain TCP and over TLS.
void outage_splits_the_limit(bool pause) {
  CAPTURE(pause);
  bool tls = false;
  SUBCASE("plain TCP") {}
  SUBCASE("TLS") { tls = true; }
  Served served = serve(tls);
  RedisServer& redis = *served.server;
  auto engines = engines_on(served.url(), "split", 4);
  REQUIRE(eventually([&] { return all_see(engines, 4); }));
  const Limit limit = Limit(40, 10s).with_failure_policy(FailurePolicy::partitioned);
  const Limit local = Limit(40, 10s);
  for (auto& e : engines) REQUIRE(e->try_acquire("warm", limit).allowed);
  if (pause) {
    redis.pause();
  } else {
    redis.stop(true);  // killed
  }
  for (auto& e : engines) {
    int admitted = 0;
    int degraded = 0;
    for (int i = 0; i < 30; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const Decision d = e->try_acquire("outage", limit);
      // Never past the deadline (the first call notices the outage; later ones skip it).
      CHECK(std::chrono::steady_clock::now() - start < within_deadlines(1));
      admitted += d.allowed ? 1 : 0;
      degraded += d.degraded ? 1 : 0;
    }
    // The call that found Redis gone admitted on the whole limit, as local does; after
    // it, a quarter of 40.
    CHECK(admitted >= 10);
    CHECK(admitted <= 11);
    CHECK(degraded >= 29);
    int alone = 0;
    for (int i = 0; i < 60; ++i) alone += e->try_acquire("local", local).allowed ? 1 : 0;
    CHECK(alone == 40);  // `local` grants the whole limit on every node
  }
  if (pause) {
    redis.resume();
  } else {
    REQUIRE(redis.start());
  }
  // Back: the whole limit, shared again.
  REQUIRE(eventually([&] {
    for (auto& e : engines)
      if (e->try_acquire("after", limit, 0).degraded || !e->stats().store_available) return false;
    return true;
  }));
  int admitted = 0;
  for (int i = 0; i < 60; ++i) admitted += engines[i % 4]->try_acquire("after", limit).allowed ? 1 : 0;
  CHECK(admitted == 40);
}

TEST_CASE("while Redis is killed, each of 4 engines admits a quarter of a partitioned limit") {
  outage_splits_the_limit(false);
}

TEST_CASE("while Redis is paused, the same") { outage_splits_the_limit(true); }

}  // namespace
}  // namespace ratewin::test
