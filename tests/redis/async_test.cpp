// AsyncAcquirer against a real redis-server: admissions complete on the caller's libuv
// loop, on its own connection, without the loop waiting for their round trips.
#include <doctest/doctest.h>

#include <uv.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deadlines.h"
#include "eventually.h"
#include "ratewin/async.h"
#include "ratewin/engine.h"
#include "redis_server.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;

Options async_options(const std::string& url, const std::string& prefix) {
  Options o;
  o.redis = url;
  o.key_prefix = prefix;
  o.connect_timeout = kDeadline;  // (long against a busy machine's delays: deadlines.h)
  o.command_timeout = kDeadline;
  o.logger = [](LogLevel, std::string_view) {};
  return o;
}

// A loop of the test's own. (Its bounds, kHang, only end a wait whose event never came.)
struct Loop {
  uv_loop_t loop{};
  Loop() { uv_loop_init(&loop); }
  ~Loop() {
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
  }
  // Runs the loop until `done` says so.
  void run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kHang;
    while (!done() && std::chrono::steady_clock::now() < deadline) uv_run(&loop, UV_RUN_ONCE);
  }
  // Turns the loop until nothing is left on it (an AsyncAcquirer's connections, after its
  // close(), end their handles there).
  void drain() {
    const auto deadline = std::chrono::steady_clock::now() + kHang;
    while (uv_loop_alive(&loop) != 0 && std::chrono::steady_clock::now() < deadline)
      uv_run(&loop, UV_RUN_NOWAIT);
  }
};

// The loop's connection is made on first use, and until it is up a write goes the
// blocking way (decided before try_acquire_all returns): warm writes, with turns of the
// loop between them, until one goes out on the loop's connection (pending), and its
// reply. (Before, one write and 100 ms of turns, which a busy machine could outlast.)
void connect(AsyncAcquirer& acquirer, Loop& loop) {
  const Limit any(Limit::kMaxCount, 10s, 1s);
  std::vector<Decision> out(1);
  const Acquisition warm[] = {{hash("warm"), any, 1}};
  bool replied = false;
  REQUIRE(eventually([&] {
    uv_run(&loop.loop, UV_RUN_NOWAIT);
    return acquirer.try_acquire_all(warm, out, [&](std::size_t, std::span<const Decision>) {
      replied = true;
    }) == AsyncAcquirer::kPending;
  }));
  loop.run_until([&] { return replied; });
  REQUIRE(replied);
}

struct Outcome {
  std::size_t allowed = 0;
  std::size_t refused = 0;
  std::size_t degraded = 0;
  std::size_t completed = 0;
  void take(std::size_t refused_index, std::span<const Decision> d) {
    ++completed;
    (refused_index == d.size() ? allowed : refused) += 1;
    for (const Decision& x : d) degraded += x.degraded ? 1 : 0;
  }
};

}  // namespace

TEST_CASE("async acquire: admissions complete on the loop, as many as the limit") {
  RedisServer redis;
  Engine engine(async_options(redis.url(), "async1"));
  Loop loop;
  AsyncAcquirer acquirer(engine, &loop.loop);
  const Limit per_key(10, 10s, 1s);
  const Limit global(1000, 10s, 1s);
  connect(acquirer, loop);
  std::vector<Decision> out(2);

  Outcome o;
  std::size_t pending = 0;
  std::size_t immediate_refusals = 0;
  for (int i = 0; i < 40; ++i) {
    const Acquisition items[] = {{hash("client"), per_key, 1}, {hash("all"), global, 1}};
    const std::size_t r = acquirer.try_acquire_all(
        items, out, [&](std::size_t refused, std::span<const Decision> d) { o.take(refused, d); });
    if (r == AsyncAcquirer::kPending) {
      ++pending;
    } else {
      CHECK(r == 0);  // refused on the key's local counts, without a round trip
      ++immediate_refusals;
    }
  }
  // Submitting did not wait for Redis: the writes are still in flight.
  CHECK(pending >= 10);
  CHECK(o.completed == 0);
  CHECK(acquirer.pending() == pending);
  loop.run_until([&] { return o.completed == pending; });
  CHECK(o.completed == pending);
  CHECK(o.allowed == 10);
  CHECK(o.degraded == 0);
  CHECK(acquirer.pending() == 0);
  // The shared counts agree: the global limit counted the admissions only.
  const Stats s = engine.stats();
  CHECK(s.writes_ok >= 20);
  CHECK(s.writes_failed == 0);
  Engine other(async_options(redis.url(), "async1"));
  CHECK_FALSE(other.try_acquire("client", per_key).allowed);
  CHECK(other.try_acquire("all", global, 0).remaining == 1000 - 10);
  acquirer.close();
  loop.drain();
}

TEST_CASE("async acquire: Redis paused, the writes fail within the deadline, degraded") {
  RedisServer redis;
  Engine engine(async_options(redis.url(), "async2"));
  Loop loop;
  AsyncAcquirer acquirer(engine, &loop.loop);
  const Limit limit(1000, 10s, 1s);
  connect(acquirer, loop);
  std::vector<Decision> out(1);
  redis.pause();
  Outcome o;
  std::size_t pending = 0;
  for (int i = 0; i < 5; ++i) {
    const Acquisition items[] = {{hash("k" + std::to_string(i)), limit, 1}};
    if (acquirer.try_acquire_all(items, out, [&](std::size_t r, std::span<const Decision> d) {
          o.take(r, d);
        }) == AsyncAcquirer::kPending)
      ++pending;
  }
  CHECK(pending == 5);
  const auto t0 = std::chrono::steady_clock::now();
  loop.run_until([&] { return o.completed == pending; });
  const auto waited = std::chrono::steady_clock::now() - t0;
  redis.resume();
  CHECK(o.completed == 5);
  CHECK(o.degraded == 5);  // the local policy: admitted on local counts, degraded
  CHECK(o.allowed == 5);
  // The command timeout, and up to a quarter of it more (the watchdog's period).
  CHECK(waited < within_deadlines(1));
  acquirer.close();
  loop.drain();
}

TEST_CASE("async acquire: closing with writes in flight completes them; local mode never waits") {
  RedisServer redis;
  Engine engine(async_options(redis.url(), "async3"));
  Loop loop;
  std::vector<Decision> out(1);
  const Limit limit(1000, 10s, 1s);
  {
    AsyncAcquirer acquirer(engine, &loop.loop);
    connect(acquirer, loop);
    Outcome o;
    const Acquisition items[] = {{hash("x"), limit, 1}};
    REQUIRE(acquirer.try_acquire_all(items, out, [&](std::size_t r, std::span<const Decision> d) {
      o.take(r, d);
    }) == AsyncAcquirer::kPending);
    acquirer.close();
    CHECK(o.completed == 1);
    CHECK(o.degraded == 1);
    // After close, decisions are made the blocking way.
    CHECK(acquirer.try_acquire_all(items, out, [](std::size_t, std::span<const Decision>) {}) == 1);
    loop.drain();
  }
  Engine local;
  AsyncAcquirer acquirer(local, &loop.loop);
  const Acquisition items[] = {{hash("y"), Limit(1, 1s), 1}};
  CHECK(acquirer.try_acquire_all(items, out, [](std::size_t, std::span<const Decision>) {}) == 1);
  CHECK(acquirer.try_acquire_all(items, out, [](std::size_t, std::span<const Decision>) {}) == 0);
}

}  // namespace ratewin::test

namespace ratewin::test {

TEST_CASE("engine async acquire: refusals at once, admissions on the store's thread, exact") {
  RedisServer redis;
  const Options options = async_options(redis.url(), "async4");
  Engine a(options);
  Engine b(options);
  const Limit limit(30, 10s, 1s);
  std::mutex mutex;
  std::condition_variable changed;
  Outcome o;
  std::set<std::thread::id> threads;
  std::size_t pending = 0;
  std::size_t decided_now = 0;
  std::size_t allowed_now = 0;
  // 2 engines x 40 calls from 2 threads each, for one resource: 30 admitted in all.
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      Engine& e = t % 2 == 0 ? a : b;
      for (int i = 0; i < 20; ++i) {
        const Acquisition items[] = {{hash("shared"), limit, 1}};
        std::vector<Decision> out(1);
        const std::size_t r = e.try_acquire_all_async(
            items, out, [&](std::size_t refused, std::span<const Decision> d) {
              std::lock_guard lock(mutex);
              threads.insert(std::this_thread::get_id());
              o.take(refused, d);
              changed.notify_all();
            });
        std::lock_guard lock(mutex);
        if (r == Engine::kPending) {
          ++pending;
        } else {
          ++decided_now;
          if (r == 1) ++allowed_now;
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  {
    std::unique_lock lock(mutex);
    CHECK(changed.wait_for(lock, kHang, [&] { return o.completed == pending; }));
    CHECK(o.allowed + allowed_now == 30);
    CHECK(decided_now + pending == 80);
    CHECK(decided_now > 0);  // refusals on local counts, without a round trip
    CHECK(o.degraded == 0);
    for (const std::thread::id& id : threads) CHECK(id != std::this_thread::get_id());
  }
  // The refused writes were given back (sent without waiting for their replies, so a
  // moment after the callbacks): a new engine sees exactly the 30.
  CHECK(eventually([&] {
    Engine c(options);
    return c.try_acquire("shared", limit.with_max(31), 0).remaining == 1;
  }));
}

TEST_CASE("engine async acquire: an engine closed with calls in flight completes them") {
  RedisServer redis;
  Outcome o;
  std::atomic<int> completed{0};
  {
    Engine engine(async_options(redis.url(), "async5"));
    const Limit limit(1000, 10s, 1s);
    REQUIRE(engine.try_acquire("warm", limit).allowed);  // connected
    redis.pause();
    std::vector<Decision> out(1);
    for (int i = 0; i < 10; ++i) {
      const Acquisition items[] = {{hash("k" + std::to_string(i)), limit, 1}};
      CHECK(engine.try_acquire_all_async(items, out, [&](std::size_t, std::span<const Decision>) {
        ++completed;
      }) == Engine::kPending);
    }
  }  // the engine closes here, Redis paused
  redis.resume();
  CHECK(completed == 10);
}

TEST_CASE("engine async acquire in local mode decides at once") {
  Engine engine;
  const Limit limit(1, 1s, 100ms);
  std::vector<Decision> out(1);
  const Acquisition items[] = {{hash("x"), limit, 1}};
  bool called = false;
  const auto done = [&](std::size_t, std::span<const Decision>) { called = true; };
  CHECK(engine.try_acquire_all_async(items, out, done) == 1);
  CHECK(out[0].allowed);
  CHECK(engine.try_acquire_all_async(items, out, done) == 0);
  CHECK_FALSE(out[0].allowed);
  CHECK_FALSE(called);
}

}  // namespace ratewin::test
