// The Redis store behind Redis Sentinel: 1 primary, 1 replica and 3 sentinels, each a
// private redis-server on a free loopback port.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "ratewin/engine.h"
#include "certificates.h"
#include "deadlines.h"
#include "eventually.h"
#include "redis_server.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kSentinelPassword = "s3ntinel";

// A primary, its replica, and three sentinels watching them as "mymaster" (quorum 2,
// down after 1 s).
// With `tls`, every one also serves TLS, and replication, the sentinels' connections to
// the servers and to each other, and the addresses they give out are the TLS ones.
struct Sentinels {
  const bool tls;
  std::unique_ptr<RedisServer> primary;
  std::unique_ptr<RedisServer> replica;
  std::vector<std::unique_ptr<RedisServer>> sentinels;

  // A server: `args`, with TLS (and replication over it) when asked.
  std::unique_ptr<RedisServer> server(std::vector<std::string> args, const std::string& config = "") {
    if (!tls) return std::make_unique<RedisServer>(std::move(args), config);
    args.insert(args.end(), {"--tls-replication", "yes"});
    return std::make_unique<RedisServer>(std::move(args), config, certificates().server());
  }
  // The port clients (and the sentinels) use.
  int port_of(const RedisServer& s) const { return tls ? s.tls_port() : s.port(); }

  explicit Sentinels(bool with_tls = false) : tls(with_tls) {
    primary = server({});
    replica = server({"--replicaof", "127.0.0.1", std::to_string(port_of(*primary))});
    const std::string config = "sentinel monitor mymaster 127.0.0.1 " +
                               std::to_string(port_of(*primary)) +
                               " 2\n"
                               "sentinel down-after-milliseconds mymaster 1000\n"
                               "sentinel failover-timeout mymaster 5000\n"
                               "requirepass " +
                               std::string(kSentinelPassword);
    for (int i = 0; i < 3; ++i) {
      sentinels.push_back(server({"--sentinel"}, config));
    }
    // Ready once the replica is in sync and every sentinel knows the replica and the
    // other two sentinels.
    const bool ready =
        eventually([&] {
          if (primary->command({"INFO", "replication"}).find("state=online") == std::string::npos)
            return false;
          for (const auto& s : sentinels) {
            const std::string master =
                s->command({"SENTINEL", "master", "mymaster"}, kSentinelPassword);
            if (master.find("num-other-sentinels\n2\n") == std::string::npos ||
                master.find("num-slaves\n1\n") == std::string::npos) {
              return false;
            }
          }
          return true;
        });
    if (!ready) throw std::runtime_error("the sentinels did not get ready");
  }

  std::string url(const std::string& password = kSentinelPassword) const {
    std::string out = tls ? "rediss-sentinel://" : "redis-sentinel://";
    for (std::size_t i = 0; i < sentinels.size(); ++i) {
      if (i > 0) out += ',';
      out += "127.0.0.1:" + std::to_string(port_of(*sentinels[i]));
    }
    out += "/mymaster?sentinel_password=" + password;
    if (tls) out += "&tls_ca_file=" + certificates().path("ca.crt");
    return out;
  }
  // The primary's port as the first sentinel says it.
  int announced_port() const {
    const std::string reply = sentinels[0]->command(
        {"SENTINEL", "get-master-addr-by-name", "mymaster"}, kSentinelPassword);
    const auto newline = reply.find('\n');
    return newline == std::string::npos ? 0 : std::atoi(reply.c_str() + newline + 1);
  }
};

// Deadlines long against a busy machine's delays (deadlines.h): these cases expect their
// writes to reach Redis, and bound their calls by them.
Options sentinel_options(const std::string& url) {
  Options o;
  o.redis = url;
  o.key_prefix = "s";
  o.connect_timeout = kDeadline;
  o.command_timeout = kDeadline;
  o.sync_settle = 5ms;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

}  // namespace

TEST_CASE("Sentinel, over TCP and TLS: the engine finds the primary, follows a failover") {
  bool tls = false;
  SUBCASE("plain TCP") {}
  SUBCASE("TLS to the sentinels and the primaries") { tls = true; }
  Sentinels s(tls);
  Engine engine(sentinel_options(s.url()));
  const Limit limit(Limit::kMaxCount, 1s, 100ms);
  REQUIRE(engine.try_acquire("a", limit).allowed);
  REQUIRE_FALSE(engine.try_acquire("a", limit).degraded);
  CHECK(std::atoll(s.primary->command({"DBSIZE"}).c_str()) > 0);

  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> slowest{0};
  std::thread load([&] {
    while (!stop) {
      const auto t0 = Clock::now();
      (void)engine.try_acquire("a", limit);
      const std::int64_t took = (Clock::now() - t0).count();
      if (took > slowest) slowest = took;
      std::this_thread::sleep_for(1ms);
    }
  });
  const int old_port = s.port_of(*s.primary);
  const auto killed = Clock::now();
  s.primary->stop(/*crash=*/true);
  REQUIRE(eventually([&] { return engine.try_acquire("a", limit).degraded; }));
  // The sentinels' failover ...
  REQUIRE(eventually([&] { return s.announced_port() == s.port_of(*s.replica); }));
  const auto promoted = Clock::now();
  // ... which the engine follows: writes resume on the new primary.
  const std::uint64_t ok_before = engine.stats().writes_ok;
  REQUIRE(eventually([&] {
    const Decision d = engine.try_acquire("a", limit);
    return !d.degraded && engine.stats().writes_ok > ok_before;
  }));
  const auto followed = Clock::now();
  stop = true;
  load.join();
  const auto ms = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - killed).count();
  };
  MESSAGE("primary killed: the sentinels promoted the replica after "
          << ms(promoted) << " ms, the engine wrote to it after " << ms(followed) << " ms");
  // It followed the announcement (or its asks every 250 ms while no primary answers: about
  // 0.1 s after it on a quiet machine), not its periodic ask every 10 s: a bound half that,
  // which a busy machine's delays do not reach.
  CHECK(followed - promoted < 5s);
  // Deadlines held throughout (a connect timeout, then a command timeout).
  CHECK(std::chrono::nanoseconds(slowest.load()) < within_deadlines(2));
  CHECK(std::atoll(s.replica->command({"DBSIZE"}).c_str()) > 0);
  CHECK(s.announced_port() != old_port);

  // The old primary comes back (still saying it is a master, until the sentinels make it a
  // replica, which may take them a while): nothing is written to it, in that moment or
  // after. (Its counters start again with the new process.)
  REQUIRE(s.primary->start());
  for (int i = 0; i < 50; ++i) {
    CHECK_FALSE(engine.try_acquire("a", limit).degraded);
    std::this_thread::sleep_for(20ms);
  }
  CHECK(s.primary->calls("bitfield") == 0);
  CHECK(s.primary->calls("getex") == 0);
}

TEST_CASE("Sentinel: a wrong sentinel password is a clear error; no primary, policies rule") {
  Sentinels s;
  Options options = sentinel_options(s.url("wrong"));
  Engine engine(options);
  const Limit local(Limit::kMaxCount, 1s, 100ms);
  const Limit open = Limit(1, 1s, 100ms).with_failure_policy(FailurePolicy::open);
  const Limit closed = Limit(1000, 1s, 100ms).with_failure_policy(FailurePolicy::closed);
  const auto t0 = Clock::now();
  const Decision d = engine.try_acquire("x", local);
  CHECK(d.allowed);
  CHECK(d.degraded);
  CHECK(engine.try_acquire("o", open).allowed);
  CHECK(engine.try_acquire("o", open).allowed);
  const Decision refused = engine.try_acquire("c", closed);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after > 0ns);
  CHECK(Clock::now() - t0 < within_deadlines(0));  // no primary known: nothing waits
  const std::string error = engine.stats().last_error;
  INFO(error);
  CHECK(error.find("sentinel") != std::string::npos);
  CHECK(error.find("authentication failed") != std::string::npos);
  CHECK(error.find("wrong") == std::string::npos);  // no password in messages
}

}  // namespace ratewin::test
