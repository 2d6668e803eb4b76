// The Redis store on a local Redis Cluster (3 primaries, 3 replicas): slots, routing,
// sharing across engines, resharding under traffic, and a primary killed.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <uv.h>

#include "core/record.h"
#include "eventually.h"
#include "ratewin/async.h"
#include "ratewin/engine.h"
#include "redis/endpoint.h"
#include "redis/slot.h"
#include "certificates.h"
#include "deadlines.h"
#include "redis_cluster.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One cluster for the whole file (starting one takes a few seconds).
RedisCluster& cluster() {
  static RedisCluster c(3, 1);
  return c;
}

// Deadlines long against a busy machine's delays (deadlines.h): these cases expect their
// writes to reach Redis, and the one about deadlines bounds its calls by them.
Options cluster_options(const std::string& url) {
  Options o;
  o.redis = url;
  o.key_prefix = fresh_prefix("c");
  o.connect_timeout = kDeadline;
  o.command_timeout = kDeadline;
  o.sync_settle = 5ms;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

// A resource (its hashed name) whose slot the primary `server` serves, and one served
// elsewhere.
// A resource whose limiter under `limit` is on `server` (or, with `elsewhere`, is not).
std::uint64_t resource_on(RedisServer& server, bool elsewhere, const Limit& limit,
                          std::uint64_t from = 1, RedisCluster& c = cluster()) {
  for (std::uint64_t r = from;; ++r) {
    const std::uint64_t counter = detail::LimiterKey::counter_of(r, limit.scope());
    const bool on = c.primary_of(detail::resource_slot(counter)) == &server;
    if (on != elsewhere) return r;
  }
}

}  // namespace

TEST_CASE("key slots match CLUSTER KEYSLOT, with and without hash tags") {
  RedisServer& node = cluster().server(0);
  std::mt19937_64 rng(7);
  std::vector<std::string> keys = {"",
                                   "a",
                                   "foo",
                                   "{}",
                                   "{}x",
                                   "{a",
                                   "a}",
                                   "x{}{y}",
                                   "{user1000}.following",
                                   "foo{bar}{zap}",
                                   "foo{{bar}}zap",
                                   "{ab}{cd}",
                                   "rl:{000000001234abcd}:100x10:w",
                                   "123456789"};
  for (int i = 0; i < 300; ++i) {
    std::string k;
    const int len = static_cast<int>(rng() % 24);
    for (int j = 0; j < len; ++j) k += "ab{}c:\x01\xff"[rng() % 8];
    keys.push_back(k);
  }
  for (const std::string& k : keys) {
    INFO(k);
    CHECK(std::to_string(detail::key_slot(k)) == node.command({"CLUSTER", "KEYSLOT", k}));
  }
  CHECK(detail::key_slot("123456789") == (0x31C3 % 16384));  // CRC16/XMODEM's check value
  for (std::uint64_t r : {0ULL, 1ULL, 0x1234abcdULL, ~0ULL}) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
    CHECK(detail::resource_slot(r) == detail::key_slot(std::string("{") + hex + "}"));
  }
}

TEST_CASE("cluster and sentinel addresses parse; the seeds are the nodes") {
  const auto a = detail::RedisAddress::parse("redis-cluster://u:p%40ss@h1:7000,[::1]:7001,h3");
  CHECK(a.kind == detail::RedisAddress::Kind::kCluster);
  REQUIRE(a.servers.size() == 3);
  CHECK(a.servers[1].host == "::1");
  CHECK(a.servers[1].port == 7001);
  CHECK(a.servers[2].port == 6379);
  CHECK(a.servers[0].password == "p@ss");
  CHECK(a.node("h9", 1).user == "u");
  CHECK(a.describe() == "redis-cluster://u@h1:7000,[::1]:7001,h3:6379");
  const auto s = detail::RedisAddress::parse(
      "redis-sentinel://:pw@s1,s2:26380/mymaster?sentinel_password=sp&db=2");
  CHECK(s.kind == detail::RedisAddress::Kind::kSentinel);
  CHECK(s.master_name == "mymaster");
  CHECK(s.servers.size() == 2);
  CHECK(s.servers[0].port == 26379);
  CHECK(s.servers[0].password == "sp");
  CHECK(s.login.password == "pw");
  CHECK(s.login.db == 2);
  for (const char* bad :
       {"redis-cluster://", "redis-cluster://h:1/2", "redis-sentinel://h", "redis-sentinel://h/",
        "redis-sentinel://h/m?x=1", "redis-cluster://h:0"}) {
    INFO(bad);
    CHECK_THROWS_AS((void)detail::RedisAddress::parse(bad), std::invalid_argument);
  }
  try {
    (void)detail::RedisAddress::parse("redis-sentinel://h/m?sentinel_password=secret&bad=1");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("secret") == std::string::npos);
  }
}

TEST_CASE("three engines share limits exactly on a cluster, over every primary") {
  RedisCluster& c = cluster();
  REQUIRE(c.wait_healthy(30'000));
  const Options options = cluster_options(c.url());
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < 3; ++i) engines.push_back(std::make_unique<Engine>(options));
  const Limit limit(20, 60s, 6s);
  constexpr int kResources = 48;
  std::vector<int> admitted(kResources, 0);
  std::vector<std::thread> threads;
  std::vector<std::vector<int>> per_engine(3, std::vector<int>(kResources, 0));
  for (int e = 0; e < 3; ++e) {
    threads.emplace_back([&, e] {
      for (int round = 0; round < 15; ++round)
        for (int r = 0; r < kResources; ++r) {
          const Decision d = engines[e]->try_acquire(1000 + r, limit);
          CHECK_FALSE(d.degraded);
          if (d.allowed) ++per_engine[e][r];
        }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kResources; ++r) {
    INFO("resource " << r);
    CHECK(per_engine[0][r] + per_engine[1][r] + per_engine[2][r] == 20);
  }
  // The keys are spread over every primary.
  for (RedisServer* p : c.primaries()) {
    CHECK(std::atoll(p->command({"DBSIZE"}).c_str()) > 0);
  }
  CHECK(engines[0]->stats().store_available);
  CHECK(engines[0]->stats().writes_failed == 0);

  // A reset from one engine reaches each resource's primary: a new engine sees them
  // all fresh.
  for (int r = 0; r < kResources; ++r) CHECK(engines[r % 3]->reset(1000 + r, limit));
  Engine fresh(options);
  for (int r = 0; r < kResources; ++r) CHECK(fresh.try_acquire(1000 + r, limit).remaining == 19);
  CHECK(engines[0]->stats().last_error.empty());
}

// A scripted algorithm (`limit` admits 20 at once, and nothing comes back while this runs)
// shared exactly by three engines over every primary, each primary loading the script.
void scripted_on_cluster(const Limit& limit, std::uint64_t first_resource) {
  RedisCluster& c = cluster();
  REQUIRE(c.wait_healthy(30'000));
  for (RedisServer* p : c.primaries()) p->command({"SCRIPT", "FLUSH"});
  const Options options = cluster_options(c.url());
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < 3; ++i) engines.push_back(std::make_unique<Engine>(options));
  constexpr int kResources = 48;
  std::vector<std::vector<int>> per_engine(3, std::vector<int>(kResources, 0));
  std::vector<std::thread> threads;
  for (int e = 0; e < 3; ++e) {
    threads.emplace_back([&, e] {
      for (int round = 0; round < 15; ++round)
        for (int r = 0; r < kResources; ++r) {
          const Decision d = engines[e]->try_acquire(first_resource + r, limit);
          CHECK_FALSE(d.degraded);
          if (d.allowed) ++per_engine[e][r];
        }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kResources; ++r) {
    INFO("resource " << r);
    CHECK(per_engine[0][r] + per_engine[1][r] + per_engine[2][r] == 20);
  }
  // Each primary was asked for the script by SHA, and loaded it from its text.
  for (RedisServer* p : c.primaries()) CHECK(p->calls("eval") >= 1);
  for (const auto& engine : engines) CHECK(engine->stats().writes_failed == 0);
}

TEST_CASE("token buckets on a cluster: shared exactly over every primary, scripts loaded there") {
  // 20 at once, refilling one every 3 minutes.
  scripted_on_cluster(Limit(20, std::chrono::hours(1)).with_algorithm(Algorithm::token_bucket),
                      5000);
}

TEST_CASE("sliding logs on a cluster: shared exactly over every primary, scripts loaded there") {
  scripted_on_cluster(Limit(20, std::chrono::hours(1)).with_algorithm(Algorithm::sliding_log),
                      6000);
}

TEST_CASE("boundary reads on a cluster bring other engines' counts from every primary") {
  RedisCluster& c = cluster();
  REQUIRE(c.wait_healthy(30'000));
  const Options options = cluster_options(c.url());
  Engine reader(options);
  Engine writer(options);
  const Limit limit(1000, 10s, 1s);
  constexpr int kResources = 60;
  for (int r = 0; r < kResources; ++r) REQUIRE(reader.try_acquire(5000 + r, limit).allowed);
  // Boundary reads read the limiters the reader's loop has taken in: wait for that (it
  // was a sleep to just past the next boundary, 20 ms or more after these writes).
  REQUIRE(eventually([&] { return reader.stats().active_limiters == kResources; }));
  for (int r = 0; r < kResources; ++r)
    for (int k = 0; k < 5; ++k) REQUIRE(writer.try_acquire(5000 + r, limit).allowed);
  // The reader learns of the writer's 5 per resource at the next boundary read, without
  // writing: remaining goes from 999 to at most 994 for each (a question reads locally).
  REQUIRE(eventually([&] {
    for (int r = 0; r < kResources; ++r)
      if (reader.try_acquire(5000 + r, limit, 0).remaining > 994) return false;
    return true;
  }));
  CHECK(reader.stats().sync_rounds > 0);
  CHECK(reader.stats().sync_failures == 0);
}

TEST_CASE("try_acquire_all over limits on every primary: all or nothing, shared exactly") {
  RedisCluster& c = cluster();
  REQUIRE(c.wait_healthy(30'000));
  const Options options = cluster_options(c.url());
  Engine a(options);
  Engine b(options);
  const std::vector<RedisServer*> primaries = c.primaries();
  REQUIRE(primaries.size() == 3);
  const Limit limit(10, 60s, 6s);
  std::vector<Acquisition> group;
  std::uint64_t from = 1;
  for (RedisServer* p : primaries) {
    from = resource_on(*p, false, limit, from) + 1;
    group.push_back({from - 1, limit});
  }
  // The tightest, on primary 1 (in the first limit's scope: the same counter, the same slot).
  group.push_back({group[0].resource, Limit(7, 30s, 3s).with_scope_id(limit.scope())});
  std::vector<Decision> out(group.size());
  int admitted = 0;
  for (int i = 0; i < 20; ++i) {
    Engine& e = i % 2 == 0 ? a : b;
    const std::size_t refused = e.try_acquire_all(group, out);
    for (const Decision& d : out) CHECK_FALSE(d.degraded);
    if (refused == group.size()) ++admitted;
  }
  CHECK(admitted == 7);
  // Nothing refused stayed counted: a fresh engine sees 7 on each limit.
  Engine fresh(options);
  for (const Acquisition& item : group) {
    const Decision d = fresh.try_acquire(item.resource, item.limit, 0);
    CHECK(d.remaining == item.limit.max() - 7);
  }
}

TEST_CASE("resharding under traffic: no call fails, and the shared counts stay right") {
  RedisCluster& c = cluster();
  REQUIRE(c.wait_healthy(30'000));
  Options options = cluster_options(c.url());
  // This case is about redirections, not deadlines: a round trip slowed by a busy machine
  // (sanitizers, other work; redis-cli moving keys) must not count as a failed write.
  options.command_timeout = 5 * kDeadline;
  constexpr int kEngines = 3;
  constexpr std::uint64_t kResources = 300;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < kEngines; ++i) engines.push_back(std::make_unique<Engine>(options));
  // Nothing leaves the window while this runs; nothing is refused.
  const Limit limit(1'000'000'000, 600s, 60s);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> degraded{0};
  std::vector<std::thread> threads;
  for (int e = 0; e < kEngines; ++e) {
    threads.emplace_back([&, e] {
      std::uint64_t r = static_cast<std::uint64_t>(e) * 97;
      while (!stop) {
        const Decision d =
            engines[static_cast<std::size_t>(e)]->try_acquire(9000 + r % kResources, limit);
        if (d.allowed) ++admitted;
        if (d.degraded) ++degraded;
        ++r;
      }
    });
  }
  // And an event loop whose writes go out on its own connections (AsyncAcquirer), up to
  // 32 at a time: MOVED and ASK replies reach it as they reach the blocking writes.
  Engine looped(options);
  threads.emplace_back([&] {
    uv_loop_t loop;
    uv_loop_init(&loop);
    {
      AsyncAcquirer acquirer(looped, &loop);
      std::vector<Decision> out(1);
      std::uint64_t r = 7;
      const auto take = [&](std::size_t refused, std::span<const Decision> d) {
        if (refused == d.size()) ++admitted;
        if (d[0].degraded) ++degraded;
      };
      while (!stop || acquirer.pending() != 0) {
        while (!stop && acquirer.pending() < 32) {
          const Acquisition item[] = {{9000 + r++ % kResources, limit, 1}};
          const std::size_t refused = acquirer.try_acquire_all(item, out, take);
          if (refused != AsyncAcquirer::kPending) take(refused, out);
        }
        uv_run(&loop, acquirer.pending() != 0 ? UV_RUN_ONCE : UV_RUN_NOWAIT);
      }
      acquirer.close();
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
  });
  // Traffic on both paths before the slots move, during, and after, until there has been
  // enough of it (waits, where this was 200 ms of traffic either side and a check of the
  // totals after, which a slow machine could fall short of).
  const auto flowing = [&](std::uint64_t blocking, std::uint64_t looping) {
    return eventually(
        [&] { return admitted.load() > blocking && looped.stats().writes_ok > looping; });
  };
  CHECK(flowing(100, 10));  // (CHECK: the threads must be stopped below, whatever happens)
  const std::uint64_t admitted_before = admitted.load();
  const std::uint64_t looped_before = looped.stats().writes_ok;
  const std::vector<RedisServer*> primaries = c.primaries();
  REQUIRE(primaries.size() == 3);
  // A third of one primary's slots to another, and back half of them.
  const bool moved =
      c.reshard(*primaries[0], *primaries[1], 1500) && c.reshard(*primaries[1], *primaries[0], 700);
  const std::uint64_t admitted_while = admitted.load() - admitted_before;
  const std::uint64_t looped_while = looped.stats().writes_ok - looped_before;
  CHECK(flowing(1000, 100));
  stop = true;
  for (auto& t : threads) t.join();
  if (!moved) FAIL(server_programs().cli << " --cluster reshard failed: " << c.last_output());
  CHECK(degraded == 0);
  std::uint64_t writes_failed = looped.stats().writes_failed;
  for (const auto& engine : engines) writes_failed += engine->stats().writes_failed;
  CHECK(writes_failed == 0);
  CHECK(admitted_while > 0);  // (moving the slots takes seconds)
  CHECK(looped_while > 0);
  // What Redis counted, read by a new engine (a question about a limiter new to it reads
  // the whole window).
  Engine fresh(options);
  std::uint64_t shared = 0;
  for (std::uint64_t r = 0; r < kResources; ++r) {
    const Decision d = fresh.try_acquire(9000 + r, limit, 0);
    REQUIRE_FALSE(d.degraded);
    shared += limit.max() - d.remaining;
  }
  MESSAGE("resharding 1500 + 700 slots under traffic: "
          << admitted.load() << " admitted (" << admitted_while
          << " while the slots moved), Redis counted " << shared);
  // At most one request in flight per engine may be miscounted (32 for the loop's).
  CHECK(shared + kEngines + 32 >= admitted.load());
  CHECK(shared <= admitted.load() + kEngines + 32);
}

// Last in the file: it kills a primary.
namespace {

// A primary of `c` killed while an engine on `url` writes to every primary: only its
// slots go degraded, then the engine follows the promoted replica.
void primary_killed(RedisCluster& c, const std::string& url) {
  REQUIRE(c.wait_healthy(30'000));
  Options options = cluster_options(url);
  Engine engine(options);
  const std::vector<RedisServer*> primaries = c.primaries();
  REQUIRE(primaries.size() == 3);
  RedisServer& victim = *primaries[0];
  const Limit limit(Limit::kMaxCount, 1s, 100ms);
  const std::uint64_t dead = resource_on(victim, false, limit, 1, c);
  const std::uint64_t live = resource_on(victim, true, limit, 1, c);
  REQUIRE_FALSE(engine.try_acquire(dead, limit).degraded);
  REQUIRE_FALSE(engine.try_acquire(live, limit).degraded);

  std::atomic<bool> stop{false};
  std::atomic<int> live_degraded{0};
  std::atomic<int> live_calls{0};
  std::atomic<std::int64_t> slowest{0};
  std::thread load([&] {
    while (!stop) {
      const auto t0 = Clock::now();
      const Decision d = engine.try_acquire(live, limit);
      const std::int64_t took = (Clock::now() - t0).count();
      if (took > slowest) slowest = took;
      if (d.degraded) ++live_degraded;
      ++live_calls;
      std::this_thread::sleep_for(1ms);
    }
  });
  const auto killed = Clock::now();
  const int calls_at_kill = live_calls.load();
  victim.stop(/*crash=*/true);
  // Its resources go degraded ...
  REQUIRE(eventually([&] { return engine.try_acquire(dead, limit).degraded; }));
  const auto noticed = Clock::now();
  // ... until the replica is promoted and the engine has followed it.
  REQUIRE(eventually([&] { return !engine.try_acquire(dead, limit).degraded; }));
  const auto recovered = Clock::now();
  const int calls_in_outage = live_calls.load() - calls_at_kill;
  // The load goes on until it has made 100 calls in all (a wait, not a check: a busy
  // machine makes fewer a second).
  CHECK(eventually([&] { return live_calls.load() > 100; }));
  stop = true;
  load.join();
  CHECK(calls_in_outage > 0);  // (a failover takes the cluster a second or more)
  CHECK(live_degraded == 0);  // another primary's resources never noticed
  // No call waited longer than a deadline (a connect timeout, then a command timeout).
  CHECK(std::chrono::nanoseconds(slowest.load()) < within_deadlines(2));
  // Every connection follows in time (the background reads' may find the old primary
  // gone after the writes have moved on: store_available is false until one succeeds).
  CHECK(eventually([&] { return engine.stats().store_available; }));
  const Decision after = engine.try_acquire(dead, limit);
  CHECK(after.allowed);
  CHECK_FALSE(after.degraded);
  MESSAGE("primary killed: degraded after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(noticed - killed).count()
          << " ms, writing to the promoted replica after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(recovered - killed).count()
          << " ms (cluster-node-timeout 1000 ms)");
}

}  // namespace

TEST_CASE("a primary killed: only its slots go degraded, and writes resume on its replica") {
  primary_killed(cluster(), cluster().url());
}

TEST_CASE("a TLS cluster (clients, bus and replication over TLS): shared exactly, a primary killed") {
  Certificates certs;
  RedisCluster tls(3, 1, 1000, certs.server());
  const std::string url = tls.tls_url() + "?tls_ca_file=" + certs.path("ca.crt");
  {
    // Three engines share limits exactly over every primary (nodes learnt from CLUSTER
    // SLOTS are reached over TLS, verified by address).
    const Options options = cluster_options(url);
    std::vector<std::unique_ptr<Engine>> engines;
    for (int i = 0; i < 3; ++i) engines.push_back(std::make_unique<Engine>(options));
    const Limit limit(7, 10s, 1s);
    for (RedisServer* primary : tls.primaries()) {
      const std::uint64_t r = resource_on(*primary, false, limit, 1, tls);
      int allowed = 0;
      for (int i = 0; i < 21; ++i) {
        const Decision d = engines[static_cast<std::size_t>(i % 3)]->try_acquire(r, limit);
        CHECK_FALSE(d.degraded);
        allowed += d.allowed ? 1 : 0;
      }
      CHECK(allowed == 7);
    }
  }
  primary_killed(tls, url);
}

}  // namespace ratewin::test
