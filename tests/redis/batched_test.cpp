// Batched write mode against a real redis-server: admissions without round trips, what
// the flushes carry, close, and K engines sharing one limit within batched mode's bound
// (scaled down from ratewin-bench accuracy's scenarios).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deadlines.h"
#include "eventually.h"
#include "overload.h"
#include "ratewin/engine.h"
#include "redis_server.h"
#include "sliding.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;


Options batched_options(const std::string& url) {
  Options o;
  o.redis = url;
  o.key_prefix = fresh_prefix("b");
  o.connect_timeout = kDeadline;  // (long against a busy machine's delays: deadlines.h)
  o.command_timeout = kDeadline;
  o.sync_settle = 5ms;
  o.write_mode = WriteMode::batched;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

}  // namespace

TEST_CASE("batched: admissions make no round trip; a flush writes each limiter's sum once") {
  RedisServer redis;
  Options options = batched_options(redis.url());
  // A manual clock, standing at the machine's time: the engine's thread does not flush
  // (the test flushes itself), so no flush of its falls among the admissions counted
  // below, however long a busy machine takes over them.
  options.clock = std::make_shared<ManualClock>(std::chrono::nanoseconds(SystemClock::read()));
  options.sync_clock = false;
  Engine engine(options);
  REQUIRE(eventually([&] { return engine.stats().live_nodes == 1; }));
  const Limit limit(1000, 60s, 6s);
  REQUIRE(engine.try_acquire("a", limit).allowed);  // cold: written at once (a warm start)
  // Every command Redis processed but the engine's background ones, which come on their
  // own time: its heartbeat (ZADD, ZREMRANGEBYSCORE, PEXPIRE, ZCARD, once a second),
  // clock probes (TIME) and keep-alives (PING).
  const std::set<std::string> background{"zadd", "zremrangebyscore", "pexpire", "zcard", "time",
                                         "ping"};
  const auto processed = [&] {
    long long n = 0;
    for (const auto& [name, stat] : redis.commandstats())
      if (!background.contains(name)) n += stat.calls;
    return n;
  };
  const long long bitfields = redis.calls("bitfield");
  const long long before = processed();
  for (int i = 0; i < 100; ++i) REQUIRE(engine.try_acquire("a", limit).allowed);
  CHECK(processed() == before + 1);  // the INFO that read `before`, and nothing else
  CHECK(engine.flush());
  CHECK(redis.calls("bitfield") <= bitfields + 2);
  // Another node reads the shared count: all 101.
  Options reader = batched_options(redis.url());
  reader.key_prefix = options.key_prefix;
  reader.write_mode = WriteMode::sync;
  Engine other(reader);
  CHECK(other.try_acquire("a", limit, 0).remaining == 1000 - 101);
}

TEST_CASE("batched: closing an engine flushes what it admitted") {
  RedisServer redis;
  const Options options = batched_options(redis.url());
  const Limit limit(1000, 60s, 6s);
  {
    Engine engine(options);
    for (int i = 0; i < 150; ++i) REQUIRE(engine.try_acquire("c", limit).allowed);
  }
  Options reader = options;
  reader.write_mode = WriteMode::sync;
  Engine other(reader);
  CHECK(other.try_acquire("c", limit, 0).remaining == 1000 - 150);
}

// K engines (separate connections, as separate nodes) at 10x overload on one resource,
// once each has read how many share the store (until then they write as sync mode does),
// and engines joining and leaving meanwhile. Batched mode's bound (README, "Batched
// mode"): no window holds more than sync mode's bound (max + the most admitted in one
// subinterval, see redis_test) plus 4K - 1 units (rounding, and up to three writes
// through per engine a round). A cold burst from every engine at once stays within a
// tenth over the limit.
TEST_CASE("batched: engines joining and leaving mid-window keep the bound") {
  RedisServer redis;
  const Options options = batched_options(redis.url());
  const Limit limit(200, 1s, 100ms);
  const std::int64_t interval = 1'000'000'000;
  // Four engines offer 500 requests/s each for 3 s (10x); a fifth is made 1 s in and
  // offers as much (counted by the others only once its heartbeat is read, up to a
  // second later); the first is closed 2 s in (its pending counts flushed).
  struct Part {
    std::chrono::milliseconds from, until;
  };
  const std::vector<Part> parts = {{0ms, 2000ms}, {0ms, 3000ms}, {0ms, 3000ms}, {0ms, 3000ms},
                                   {1000ms, 3000ms}};
  std::vector<std::unique_ptr<Engine>> first;
  for (int i = 0; i < 4; ++i) first.push_back(std::make_unique<Engine>(options));
  for (const auto& e : first) REQUIRE(eventually([&] { return e->stats().live_nodes == 4; }));
  std::vector<std::vector<std::int64_t>> admitted(parts.size());
  std::vector<std::vector<std::int64_t>> offered(parts.size());
  std::barrier start(static_cast<std::ptrdiff_t>(parts.size()));
  std::vector<std::thread> threads;
  const auto begin = std::chrono::steady_clock::now() + 50ms;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      std::this_thread::sleep_until(begin + parts[i].from);
      std::unique_ptr<Engine> engine =
          i < first.size() ? std::move(first[i]) : std::make_unique<Engine>(options);
      const auto end = begin + parts[i].until;
      while (std::chrono::steady_clock::now() < end) {
        offered[i].push_back(SystemClock::read());
        if (engine->try_acquire("hot", limit).allowed) admitted[i].push_back(SystemClock::read());
        std::this_thread::sleep_for(2ms);
      }
      engine.reset();  // leaves: closed, its pending counts flushed
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::int64_t> all;
  for (const auto& a : admitted) all.insert(all.end(), a.begin(), a.end());
  // From the first window's end on (its cold start is the steady case's, below).
  const std::int64_t from = *std::min_element(all.begin(), all.end()) + interval;
  std::vector<std::int64_t> steady;
  std::copy_if(all.begin(), all.end(), std::back_inserter(steady),
               [&](std::int64_t t) { return t >= from; });
  std::chrono::nanoseconds gap{0};  // the longest any thread went between two requests
  for (auto& o : offered) gap = std::max(gap, longest_gap(std::move(o), from));
  const std::size_t worst = max_in_window(steady, interval);
  const std::size_t busiest_epoch = max_in_window(steady, interval / 10);
  MESSAGE("batched join and leave under overload, limit 200/s: max in any 1 s = "
          << worst << ", bound 200 + " << busiest_epoch << " + " << 4 * 5 - 1
          << "; the longest a thread went between requests " << gap.count() / 1000 << " us");
  CHECK(worst <= 200 + busiest_epoch + 4 * 5 - 1);
  // (a)'s bound, within a twentieth of the limit, where the threads kept their pace (see
  // the steady overload case below).
  if (gap < 10ms) CHECK(worst <= 210);
  CHECK(worst >= 160);
  CHECK_FALSE(admitted[4].empty());  // the engine that joined took its part
}

// 8 engines on `options`, once each counts the 8 live.
std::vector<std::unique_ptr<Engine>> eight_engines(const Options& options) {
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < 8; ++i) engines.push_back(std::make_unique<Engine>(options));
  for (const auto& e : engines) REQUIRE(eventually([&] { return e->stats().live_nodes == 8; }));
  return engines;
}

TEST_CASE("batched: several engines share one limit within the bound") {
  RedisServer redis;
  constexpr int kEngines = 4;

  SUBCASE("steady overload") {
    const std::vector<std::unique_ptr<Engine>> engines =
        eight_engines(batched_options(redis.url()));
    const Limit limit(200, 1s, 100ms);
    const std::int64_t interval = 1'000'000'000;
    // 4 x 500 requests/s for 200/s: 10x; after the first window (cold start).
    const Overload run = steady_admissions(engines, kEngines, "hot", limit, 2ms, 3s, 1s);
    const std::size_t worst = max_in_window(run.admitted, interval);
    const std::size_t busiest_epoch = max_in_window(run.admitted, interval / 10);
    MESSAGE("batched steady overload, "
            << kEngines << " engines, limit 200/s: max in any 1 s = " << worst << ", bound 200 + "
            << busiest_epoch << " + " << 4 * kEngines - 1
            << "; the longest a thread went between requests " << run.longest_gap.count() / 1000
            << " us");
    CHECK(worst <= 200 + busiest_epoch + 4 * kEngines - 1);
    // What that comes to here: within a twentieth of the limit (measured: 200). Only where
    // the threads kept their pace: stalls (ThreadSanitizer, tests/under_load.sh's hog)
    // bunch the requests and the engines' flushes (216 beside the hog); the bound above
    // still holds.
    if (run.longest_gap < 10ms) CHECK(worst <= 210);
    CHECK(worst >= 160);  // and it does admit about the limit (the most in any 1 s)
  }

  SUBCASE("cold burst") {
    // On a manual clock that stands still, so that the burst falls within one flush round
    // of each engine (the engines' threads do not flush), as it does in the few
    // milliseconds it takes on a machine that keeps time. (On the machine's clock, a
    // ThreadSanitizer build beside a CPU hog took long enough for rounds to end mid-burst
    // without their flushes completing, which the bound assumes: 127 admitted.)
    Options options = batched_options(redis.url());
    options.clock = std::make_shared<ManualClock>(std::chrono::nanoseconds(SystemClock::read()));
    options.sync_clock = false;
    const std::vector<std::unique_ptr<Engine>> engines = eight_engines(options);
    const Limit limit(100, 10s, 1s);
    std::atomic<int> admitted{0};
    std::barrier start(8);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        int mine = 0;
        for (int k = 0; k < 100; ++k) mine += engines[i]->try_acquire("burst", limit).allowed ? 1 : 0;
        admitted += mine;
      });
    }
    for (auto& t : threads) t.join();
    MESSAGE("batched cold burst, 8 engines offered 100 each: admitted " << admitted.load());
    CHECK(admitted.load() <= 110);
    CHECK(admitted.load() >= 8);
  }
}

}  // namespace ratewin::test
