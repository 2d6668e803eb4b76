#include "ratewin/engine.h"

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <barrier>
#include <latch>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/window.h"
#include "engine/engine_core.h"
#include "fake_store.h"
#include "reference_window.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;

// The figures a decision reports match the reference's.
void require_same_figures(const Decision& got, const Decision& want) {
  REQUIRE(got.allowed == want.allowed);
  REQUIRE(got.limit == want.limit);
  REQUIRE(got.remaining == want.remaining);
  REQUIRE(got.reset_after == want.reset_after);
  REQUIRE(got.retry_after == want.retry_after);
}

}  // namespace

TEST_CASE_FIXTURE(Fixture, "engine decides, counts and explains") {
  Engine engine(options());
  const Limit limit(10, 1s, 100ms);
  for (int i = 0; i < 10; ++i) {
    const Decision d = engine.try_acquire("user:1", limit);
    CHECK(d.allowed);
    CHECK(d.remaining == std::uint64_t(9 - i));
    CHECK(d.limit == 10);
    CHECK(d.reset_after == 1100ms);
    CHECK_FALSE(d.degraded);
  }
  const Decision rejected = engine.try_acquire("user:1", limit);
  CHECK_FALSE(rejected.allowed);
  CHECK(rejected.remaining == 0);
  // The 10 counts of t0's epoch trail during [t0+1s, t0+1.1s) with weight falling from
  // 1 to 0; at weight 0.9 (t0+1010ms) the estimate is 9 and one more fits.
  CHECK(rejected.retry_after == 1010ms);
  clock->advance(rejected.retry_after - 1ns);
  CHECK_FALSE(engine.try_acquire("user:1", limit).allowed);
  clock->advance(1ns);
  CHECK(engine.try_acquire("user:1", limit).allowed);

  const Stats s = engine.stats();
  CHECK(s.allowed == 11);
  CHECK(s.rejected == 2);
  CHECK(s.limiters == 1);
  CHECK(s.max_limiters == 1'000'000);
  CHECK(s.evictions == 0);
}

TEST_CASE("options out of range are refused with the option's name") {
  const auto message_of = [](const std::function<void(Options&)>& change) {
    Options o;
    change(o);
    try {
      Engine engine(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(message_of([](Options& o) { o.max_limiters = 0; }).find("max_limiters") !=
        std::string::npos);
  // hiredis reads a zero timeout as "wait forever": never let one through.
  CHECK(message_of([](Options& o) { o.command_timeout = 0ms; }).find("command_timeout") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.command_timeout = -5ms; }).find("command_timeout") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.connect_timeout = 0ms; }).find("connect_timeout") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.connect_timeout = 25h; }).find("connect_timeout") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.max_connections = 0; }).find("max_connections") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.sync_settle = -1ms; }).find("sync_settle") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.clock_sync_interval = -1ms; }).find("clock_sync_interval") !=
        std::string::npos);
  CHECK(message_of([](Options& o) { o.key_prefix = "app{1}"; }).find("key_prefix") !=
        std::string::npos);
  // The limits themselves are accepted.
  CHECK(message_of([](Options& o) {
          o.command_timeout = 1ms;
          o.connect_timeout = 24h;
          o.sync_settle = 0ms;
          o.clock_sync_interval = 0ms;
          o.max_connections = 1;
          o.max_limiters = 1;
          o.key_prefix = "";
        }) == "accepted");
}

TEST_CASE_FIXTURE(Fixture, "two limits of one window count apart unless given one scope") {
  Engine engine(options());
  const Limit login(3, 60s);
  const Limit api(100, 60s);
  for (int i = 0; i < 5; ++i) CHECK(engine.try_acquire("client", api).allowed);
  // The login limit has seen none of the API's requests.
  const Decision first = engine.try_acquire("client", login);
  CHECK(first.allowed);
  CHECK(first.remaining == 2);
  CHECK(engine.try_acquire("client", api).remaining == 94);
  // Named alike, they count together: 3 over both, whatever the max.
  const Limit low = Limit(3, 60s).with_scope("shared");
  const Limit high = Limit(100, 60s).with_scope("shared");
  CHECK(engine.try_acquire("client", high, 3).allowed);
  CHECK_FALSE(engine.try_acquire("client", low).allowed);
  CHECK(engine.try_acquire("client", high).remaining == 96);
  // A handle is the limiter of its limit's scope too.
  LimiterHandle handle = engine.limiter("client", low);
  CHECK_FALSE(handle.try_acquire().allowed);
  CHECK(engine.try_acquire("client", login).remaining == 1);
}

TEST_CASE_FIXTURE(Fixture, "resources, names and window geometries") {
  Engine engine(options());
  const Limit small(3, 1s, 100ms);
  CHECK(engine.try_acquire("a", small, 3).allowed);
  CHECK_FALSE(engine.try_acquire(hash("a"), small).allowed);  // a name is its hash
  CHECK(engine.try_acquire("b", small).allowed);              // another resource
  // The same limit raised with with_max (an override): the same counts.
  CHECK(engine.try_acquire("a", small.with_max(5)).remaining == 1);
  // Another limit of the same window is counted apart: two limits never share counts
  // unless asked to.
  CHECK(engine.try_acquire("a", Limit(5, 1s, 100ms), 5).allowed);
  // Another geometry on the same resource counts apart.
  CHECK(engine.try_acquire("a", Limit(3, 1s, 250ms), 3).allowed);
  CHECK(engine.stats().limiters == 4);
  // Cost 0 asks, cost > max can never pass.
  CHECK(engine.try_acquire("c", small, 0).remaining == 3);
  const Decision never = engine.try_acquire("c", small, 4);
  CHECK_FALSE(never.can_ever_pass());
}

TEST_CASE_FIXTURE(Fixture, "limiter handles") {
  auto engine = std::make_unique<Engine>(options(64));
  const Limit limit(5, 1s, 100ms);
  LimiterHandle handle = engine->limiter("hot", limit);
  CHECK(handle.resource() == hash("hot"));
  CHECK(handle.limit() == limit);
  CHECK(handle.try_acquire(2).remaining == 3);
  CHECK(engine->try_acquire("hot", limit).remaining == 2);  // the same limiter
  CHECK(engine->stats().pinned == 1);

  // A pinned limiter survives a flood that evicts everything else.
  for (std::uint64_t r = 0; r < 1000; ++r) (void)engine->try_acquire(r, limit);
  CHECK(engine->stats().limiters <= 65);
  CHECK(handle.try_acquire().remaining == 1);

  LimiterHandle moved = std::move(handle);
  CHECK_THROWS_AS((void)handle.try_acquire(), std::logic_error);  // NOLINT(bugprone-use-after-move)
  CHECK(moved.try_acquire().remaining == 0);
  {
    LimiterHandle second = engine->limiter("hot", limit);
    CHECK(engine->stats().pinned == 1);  // one limiter, pinned twice
  }
  // Handles may outlive their engine.
  engine.reset();
  CHECK_FALSE(moved.try_acquire().allowed);
}

// Every decision path of the engine (a cached rejection, a lock-free read, the locked
// path, through the registry or a handle) must give exactly what the pure window gives
// for the same sequence of requests.
TEST_CASE_FIXTURE(Fixture, "engine decisions equal the pure window's, field by field") {
  std::mt19937_64 rng(11);
  for (int trace = 0; trace < 60; ++trace) {
    Engine engine(options());
    const Algorithm algorithm = std::array{Algorithm::sliding_window, Algorithm::strict_window,
                                           Algorithm::fixed_window}[trace % 3];
    const Limit base = Limit(std::uniform_int_distribution<std::uint64_t>(1, 50)(rng), 1s,
                             std::chrono::milliseconds(
                                 std::uniform_int_distribution<int>(0, 1)(rng) == 0 ? 100 : 250))
                           .with_algorithm(algorithm);
    LimiterHandle handle = engine.limiter("r", base);
    detail::WindowState state;
    std::vector<detail::Bucket> buckets(base.subintervals());
    detail::SlidingWindow model(state, buckets.data(), base.subintervals(), base.resolution_ns());
    model.reset(clock->now().count());
    for (int i = 0; i < 3000; ++i) {
      switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
        case 0:
          clock->advance(
              std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
          break;
        case 1:
          clock->advance(
              -std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 50)(rng)));
          break;
        case 2:
        case 3:
          clock->advance(
              std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
          break;
        default:
          break;  // same instant: repeated requests hit the cached rejection
      }
      const bool via_handle = i % 3 == 0;  // a handle always uses its own limit, `base`
      const std::uint64_t max =
          via_handle ? base.max()
                     : base.max() + std::uniform_int_distribution<std::uint64_t>(0, 1)(rng) * 3;
      const Limit limit = base.with_max(max);
      const int shape = std::uniform_int_distribution<int>(0, 9)(rng);
      const std::uint64_t cost = shape == 0 ? 0 : shape == 1 ? 2 : shape == 2 ? max + 1 : 1;
      const Decision want =
          model.try_acquire(clock->now().count(), max, cost, detail::trailing_of(algorithm));
      const Decision got =
          via_handle ? handle.try_acquire(cost) : engine.try_acquire("r", limit, cost);
      if (got.allowed != want.allowed) {
        MESSAGE("t=" << clock->now().count() % 10000000000 << " cost=" << cost << " max=" << max
                     << " handle=" << via_handle << " want retry=" << want.retry_after.count()
                     << " got retry=" << got.retry_after.count() << " got reset="
                     << got.reset_after.count() << " want reset=" << want.reset_after.count()
                     << " want rem=" << want.remaining);
      }
      CAPTURE(trace);
      CAPTURE(i);
      require_same_figures(got, want);
      REQUIRE(got.degraded == want.degraded);
    }
  }
}

// Limits of one scope share counts whatever their algorithms; each decides its own way,
// and a rejection remembered for one (the lock-free read's cache) is not taken for
// another's.
TEST_CASE_FIXTURE(Fixture, "limits of one scope and different algorithms decide their own way") {
  Engine engine(options());
  const Limit sliding = Limit(10, 1s, 100ms).with_scope("shared");
  const Limit strict = sliding.with_algorithm(Algorithm::strict_window);
  for (int i = 0; i < 10; ++i) REQUIRE(engine.try_acquire("r", strict).allowed);
  clock->advance(1050ms);  // the 10 trail, half of their subinterval still in the window
  const Decision refused = engine.try_acquire("r", strict);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 50ms);  // when the trailing subinterval leaves, whole
  CHECK(engine.try_acquire("r", strict).retry_after == 50ms);  // (from the cache)
  const Decision half = engine.try_acquire("r", sliding);
  // Half the 10 would count by their overlap; a trailing count is discounted by at most
  // max / 4, so 8 count.
  CHECK(half.allowed);
  CHECK(half.remaining == 1);
}

// A rejection remembered from the last read (EngineCore::reject_again) answers only the
// same engine, resource and limit: two engines, three resources and limits that share
// counts (one scope: another max, shadow mode, another failure policy) or not (another
// scope), called in random order, decide field by field as one pure window per engine,
// resource and scope does.
TEST_CASE_FIXTURE(Fixture, "a remembered rejection answers only its own engine, resource and limit") {
  const Limit own(5, 1s, 100ms);
  const Limit named = own.with_scope("named");
  const std::vector<Limit> limits = {own, own.with_mode(Mode::shadow),
                                     own.with_failure_policy(FailurePolicy::closed), named,
                                     named.with_max(3)};
  const auto group = [&](std::size_t limit) { return limit < 3 ? 0 : 1; };  // its scope
  std::array<Engine, 2> engines{Engine(options()), Engine(options())};
  const std::array<std::uint64_t, 3> resources = {hash("a"), hash("b"), hash("a") ^ 1};
  struct Model {
    detail::WindowState state;
    std::vector<detail::Bucket> buckets = std::vector<detail::Bucket>(10);
    detail::SlidingWindow window{state, buckets.data(), 10, 100 * kMs};
  };
  std::map<std::tuple<std::size_t, std::size_t, int>, Model> models;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20'000; ++i) {
    if (rng() % 8 == 0) clock->advance(std::chrono::microseconds(rng() % 60'000));
    const std::size_t e = rng() % engines.size();
    const std::size_t r = rng() % resources.size();
    const std::size_t l = rng() % limits.size();
    const std::uint64_t cost = rng() % 10 == 0 ? 2 : 1;
    const auto [at, made] = models.try_emplace({e, r, group(l)});
    if (made) at->second.window.reset(clock->now().count());
    Decision want = at->second.window.try_acquire(clock->now().count(), limits[l].max(), cost,
                                                  detail::Trailing::interpolated);
    if (!want.allowed && limits[l].mode() == Mode::shadow) {
      want.allowed = true;
      want.would_reject = true;
    }
    const Decision got = engines[e].try_acquire(resources[r], limits[l], cost);
    CAPTURE(i);
    CAPTURE(e);
    CAPTURE(r);
    CAPTURE(l);
    require_same_figures(got, want);
    REQUIRE(got.would_reject == want.would_reject);
  }
}

// A remembered rejection is not given while the store is unreachable: the limit's failure
// policy decides then, and the decision says it is degraded.
TEST_CASE_FIXTURE(Fixture, "a remembered rejection gives way to the failure policy") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore engine(options(), std::make_unique<FakeStore>(shared));
  const Limit local(3, 1s, 100ms);
  const Limit open = local.with_failure_policy(FailurePolicy::open);
  const std::uint64_t r = hash("r");
  for (int i = 0; i < 3; ++i) REQUIRE(engine.try_acquire(r, local, 1).allowed);
  for (const Limit& limit : {local, open}) {
    shared->unreachable = false;
    const Decision before = engine.try_acquire(r, limit, 1);
    CHECK_FALSE(before.allowed);
    CHECK_FALSE(before.degraded);
    CHECK_FALSE(engine.try_acquire(r, limit, 1).allowed);  // (remembered)
    shared->unreachable = true;
    const Decision during = engine.try_acquire(r, limit, 1);
    CHECK(during.degraded);
    CHECK(during.allowed == (limit == open));
  }
}

// A resource refused by an overflow limiter is not answered from that limiter's read once
// its own limiter has room.
TEST_CASE_FIXTURE(Fixture, "a rejection by the overflow limiter is not remembered for the resource") {
  // (Sliding logs: never evicted while they count.)
  detail::EngineCore small(options(2), nullptr);
  const Limit second = Limit(1, 1s).with_algorithm(Algorithm::sliding_log);
  const Limit minute = Limit(1, 60s).with_algorithm(Algorithm::sliding_log);
  // Two limiters fill the bounds; new resources share the overflow limiter of their
  // geometry (made over the bounds).
  CHECK(small.try_acquire(hash("x"), second, 1).allowed);
  CHECK(small.try_acquire(hash("y"), second, 1).allowed);
  CHECK(small.try_acquire(hash("z"), minute, 1).allowed);  // the overflow limiter's first
  CHECK_FALSE(small.try_acquire(hash("w"), minute, 1).allowed);
  CHECK_FALSE(small.try_acquire(hash("w"), minute, 1).allowed);
  CHECK(small.stats().overflowed == 3);
  // x's and y's windows empty: w's own limiter takes their place, while the overflow
  // limiter's refusal still holds for a minute.
  clock->advance(1500ms);
  CHECK(small.try_acquire(hash("w"), minute, 1).allowed);
  CHECK(small.stats().overflowed == 3);
}

// The pure algorithms over storage of their own, as the engine tests' models.
struct BucketModel {
  explicit BucketModel(const Limit& limit) : rule(detail::BucketRule::of(limit)) { bucket.reset(); }
  void evaluate(std::int64_t t, std::uint64_t cost, Decision& out) { bucket.evaluate(t, rule, cost, out); }
  void add(std::int64_t t, std::uint64_t cost) { bucket.add(t, cost, rule); }
  detail::BucketRule rule;
  detail::WindowState state;
  detail::TokenBucket bucket{state};
};

struct LogModel {
  explicit LogModel(const Limit& limit)
      : rule(detail::LogRule::of(limit)), entries(limit.max()),
        log(state, entries.data(), static_cast<std::uint32_t>(limit.max())) {
    log.reset();
  }
  void evaluate(std::int64_t t, std::uint64_t cost, Decision& out) { log.evaluate(t, rule, cost, out); }
  void add(std::int64_t t, std::uint64_t cost) { log.add(t, cost, rule); }
  detail::LogRule rule;
  detail::WindowState state;
  std::vector<detail::LogEntry> entries;
  detail::SlidingLog log;
};

// Threads hammer one resource while time stands still; between phases the clock moves.
// Within a phase every admission happens at the same time, so whatever the
// interleaving, the admitted total must be exactly what a single-threaded model admits
// with unlimited demand at that time: never more (and, the demand being large, never
// less). `admit_one(t)` is the model: whether it admits one more at t (counting it).
template <class AdmitOne>
void concurrent_callers(Fixture& f, const Limit& limit, AdmitOne admit_one) {
  Engine engine(f.options());
  const std::uint64_t resource = hash("shared");
  constexpr int kThreads = 4;
  constexpr int kPhases = 150;
  std::atomic<std::uint64_t> admitted{0};
  std::barrier sync(kThreads + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      LimiterHandle handle = engine.limiter(resource, limit);
      for (int p = 0; p < kPhases; ++p) {
        sync.arrive_and_wait();
        std::uint64_t mine = 0;
        for (std::uint64_t k = 0; k < limit.max() / 2 + 5; ++k) {
          // Half the threads go through the registry, half through a handle.
          const Decision d =
              (i % 2 == 0) ? engine.try_acquire(resource, limit) : handle.try_acquire();
          mine += d.allowed ? 1 : 0;
        }
        admitted += mine;
        sync.arrive_and_wait();
      }
    });
  }
  std::mt19937_64 rng(5);
  for (int p = 0; p < kPhases; ++p) {
    f.clock->advance(
        std::chrono::nanoseconds(std::uniform_int_distribution<std::int64_t>(0, 150 * kMs)(rng)));
    const std::int64_t t = f.clock->now().count();
    std::uint64_t expected = 0;
    while (admit_one(t)) ++expected;
    admitted = 0;
    sync.arrive_and_wait();  // start the phase
    sync.arrive_and_wait();  // wait for its end
    CAPTURE(p);
    REQUIRE(admitted.load() == expected);
  }
  for (auto& t : threads) t.join();
}

TEST_CASE_FIXTURE(Fixture, "concurrent callers never admit more than the model allows") {
  const Limit limit(50, 1s, 100ms);
  ReferenceWindow model(limit.subintervals(), limit.resolution_ns());
  concurrent_callers(*this, limit, [&](std::int64_t t) {
    if (!model.allows(t, limit.max(), 1)) return false;
    model.admit(t, 1);
    return true;
  });
}

TEST_CASE_FIXTURE(Fixture, "concurrent callers on a sliding log admit exactly what the log does") {
  const Limit limit = Limit(50, 1s).with_algorithm(Algorithm::sliding_log);
  LogModel model(limit);
  concurrent_callers(*this, limit, [&](std::int64_t t) {
    Decision d;
    model.evaluate(t, 1, d);
    if (d.allowed) model.add(t, 1);
    return d.allowed;
  });
}

// A clock whose first reading on one thread is held back: that thread has read the time,
// and then waits (as a thread preempted between its clock read and the shard's lock).
class StallingClock final : public Clock {
 public:
  std::chrono::nanoseconds now() const noexcept override {
    const std::chrono::nanoseconds t = inner.now();
    if (std::this_thread::get_id() == stalled && !stalled_once.exchange(true)) {
      read.count_down();
      go.wait();
    }
    return t;
  }
  ManualClock inner;
  std::thread::id stalled;
  mutable std::atomic<bool> stalled_once{false};
  mutable std::latch read{1};
  std::latch go{1};
};

TEST_CASE("a sliding log decides at a time read under the lock: never more than max in a window") {
  // Before: a call that read the clock, then waited 5 ms for the lock, counted its request
  // from its clock read; its entry left the log 5 ms early, and a request 1 s after that
  // read (995 ms after the admission) was admitted too: 2 within 1 s, max 1.
  auto clock = std::make_shared<StallingClock>();
  Options options;
  options.clock = clock;
  Engine engine(options);
  const Limit limit = Limit(1, 1s).with_algorithm(Algorithm::sliding_log);
  const auto t0 = clock->inner.now();
  Decision first;
  std::thread late([&] {
    clock->stalled = std::this_thread::get_id();
    first = engine.try_acquire("r", limit);
  });
  clock->read.wait();
  clock->inner.advance(5ms);  // while it waits
  clock->go.count_down();
  late.join();
  REQUIRE(first.allowed);
  clock->inner.set(t0 + 1s);
  CHECK_FALSE(engine.try_acquire("r", limit).allowed);
  clock->inner.set(t0 + 1s + 5ms);
  CHECK(engine.try_acquire("r", limit).allowed);
}

TEST_CASE_FIXTURE(Fixture, "the registry stays within max_limiters under a flood of resources") {
  Engine engine(options(1000));
  const Limit limit(10, 1s, 100ms);
  constexpr int kThreads = 4;
  constexpr std::uint64_t kEach = 20000;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> worst{0};
  std::thread monitor([&] {
    while (!done) {
      const std::uint64_t held = engine.stats().limiters;
      if (held > worst) worst = held;
    }
  });
  // A client that used up its quota before the flood.
  for (int i = 0; i < 10; ++i) REQUIRE(engine.try_acquire(424242, limit).allowed);
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> refused{0};
  for (std::uint64_t i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (std::uint64_t r = 0; r < kEach; ++r)
        if (!engine.try_acquire(i * kEach + r, limit).allowed) ++refused;
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  monitor.join();
  const Stats s = engine.stats();
  CHECK(worst.load() <= 1000);
  CHECK(s.limiters <= 1000);
  CHECK(s.limiters >= 950);  // (less the ghost tables' bytes)
  // Every new resource was decided by a limiter of its own (one request: allowed), the
  // flood's pushing out each other; the client's spent quota held.
  CHECK(refused.load() == 0);
  CHECK(s.overflowed == 0);
  CHECK(s.evictions_active >= kThreads * kEach + 1 - 1000);
  CHECK_FALSE(engine.try_acquire(424242, limit).allowed);
  CHECK(s.allowed == 10 + kThreads * kEach);
  // Once the windows have emptied, new resources take the places of empty ones.
  clock->advance(2s);
  const Stats before = engine.stats();
  for (std::uint64_t r = 0; r < 500; ++r) CHECK(engine.try_acquire(1'000'000 + r, limit).allowed);
  CHECK(engine.stats().evictions_active == before.evictions_active);
  CHECK(engine.stats().evictions >= 500);
}

// What the server's hostile-client probe found: a flood of made-up keys filled the bounds
// with live limiters, and then every new client was refused by the shared overflow limiter.
TEST_CASE_FIXTURE(Fixture, "under a flood of new keys, a new client is decided by its own limit") {
  for (const Algorithm algorithm :
       {Algorithm::sliding_window, Algorithm::fixed_window, Algorithm::token_bucket}) {
    CAPTURE(algorithm);
    Engine engine(options(2000));
    const Limit limit = Limit(5, 60s, 1s).with_algorithm(algorithm);
    // Clients spent before the flood, and one half way.
    for (std::uint64_t c = 0; c < 20; ++c)
      for (int i = 0; i < 5; ++i) REQUIRE(engine.try_acquire(hash("spent") + c, limit).allowed);
    for (int i = 0; i < 3; ++i) REQUIRE(engine.try_acquire(hash("half"), limit).allowed);
    std::uint64_t flood = 0;
    auto flood_for = [&](std::uint64_t keys) {
      for (std::uint64_t k = 0; k < keys; ++k)
        (void)engine.try_acquire(hash("ov-" + std::to_string(flood++)), limit);
      clock->advance(10ms);  // (10 s in all: a bucket gives a token back in 12)
    };
    // 100x the bound of made-up keys, with 1,000 new clients among them: each gets
    // exactly its limit, and the spent ones stay spent.
    std::uint64_t answered = 0;
    for (std::uint64_t c = 0; c < 1000; ++c) {
      flood_for(200);
      std::uint64_t allowed = 0;
      for (int i = 0; i < 7; ++i)
        allowed += engine.try_acquire(hash("legit") + c, limit).allowed ? 1 : 0;
      answered += allowed == 5 ? 1 : 0;
    }
    CHECK(answered == 1000);
    for (std::uint64_t c = 0; c < 20; ++c)
      CHECK_FALSE(engine.try_acquire(hash("spent") + c, limit).allowed);
    CHECK(engine.try_acquire(hash("half"), limit, 2).allowed);
    CHECK_FALSE(engine.try_acquire(hash("half"), limit).allowed);
    const Stats s = engine.stats();
    CHECK(s.overflowed == 0);
    CHECK(s.limiters <= 2000);
    CHECK(s.evictions_active > 150'000);
  }
}

TEST_CASE_FIXTURE(Fixture, "the memory bound: limiters fit in max_memory, capacity says how many") {
  Options o = options(1'000'000);
  o.max_memory = 4 << 20;
  Engine engine(o);
  const Limit big(1000, 1h, 1s);  // 3600 subintervals: 14,448 bytes a limiter
  const std::size_t fit = engine.capacity(big);
  CHECK(fit > 200);
  CHECK(fit <= (4U << 20) / 14448);
  CHECK(engine.capacity(Limit(10, 1s, 100ms)) > 20 * fit);
  for (std::uint64_t r = 0; r < 5000; ++r) (void)engine.try_acquire(r, big);
  const Stats s = engine.stats();
  CHECK(s.memory <= o.max_memory);
  CHECK(s.max_memory == o.max_memory);
  CHECK(s.limiters <= fit);
  CHECK(s.limiters > fit * 8 / 10);  // the shards fill about evenly (less the ghosts)
  // Each resource had a limiter of its own, the later pushing the earlier out.
  CHECK(s.overflowed == 0);
  CHECK(s.evictions_active == 5000 - s.limiters);
  CHECK(s.allowed == 5000);
  Options tiny = options(10);
  tiny.max_memory = 1000;
  CHECK_THROWS_AS(Engine{tiny}, std::invalid_argument);
  tiny.max_memory = 16 * 1024;
  const Engine small(tiny);
  CHECK(small.capacity(Limit(1, std::chrono::milliseconds(65535), 1ms)) == 0);
  // A sliding log's limiter holds its entries: 8 bytes per unit of max, whatever its
  // (unused) resolution.
  const Limit log = Limit(4096, 1s).with_algorithm(Algorithm::sliding_log);
  CHECK(engine.limiter_bytes(log) == 48 + 8 * 4096);
  CHECK(engine.limiter_bytes(big) == 48 + 4 * 3600);
  CHECK(engine.capacity(log) <= (4U << 20) / (48 + 8 * 4096));
  CHECK(engine.capacity(log) * 2 > (4U << 20) / (48 + 8 * 4096));
  CHECK(small.capacity(log) == 0);
}

// For the sanitizers: lock-free readers race with writers that insert, evict and recycle
// records (a tiny registry under a flood), while time moves. Every decision must still be
// well-formed and every call counted.
TEST_CASE_FIXTURE(Fixture, "lock-free readers racing with inserts, evictions and record reuse") {
  Engine engine(options(64));
  const Limit hot(5, 1s, 100ms);
  const Limit other(3, 2s, 500ms);
  const Limit log = Limit(4, 1s).with_algorithm(Algorithm::sliding_log);
  constexpr int kThreads = 4;
  constexpr int kCalls = 20000;
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop) {
      clock->advance(3ms);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> bad{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      for (int i = 0; i < kCalls; ++i) {
        // Time also moves with the calls, so windows empty and their records are evicted
        // and reused however the threads are scheduled.
        if (i % 64 == 0) clock->advance(20ms);
        const int what = std::uniform_int_distribution<int>(0, 9)(rng);
        const std::uint64_t r =
            what < 5 ? std::uniform_int_distribution<std::uint64_t>(0, 3)(rng)
                     : std::uniform_int_distribution<std::uint64_t>(100, 100000)(rng);
        const Limit& limit = what % 3 == 0 ? hot : what % 3 == 1 ? other : log;
        const Decision d = engine.try_acquire(r, limit, what == 9 ? 2 : 1);
        const bool well_formed =
            d.limit == limit.max() && d.remaining <= limit.max() &&
            (d.allowed ? d.retry_after.count() == 0 && d.reset_after.count() > 0
                       : d.retry_after.count() > 0 && d.can_ever_pass());
        if (!well_formed) ++bad;
      }
    });
  }
  for (auto& t : threads) t.join();
  stop = true;
  ticker.join();
  CHECK(bad.load() == 0);
  const Stats s = engine.stats();
  CHECK(s.allowed + s.rejected == std::uint64_t{kThreads} * kCalls);
  CHECK(s.limiters <= 64 + 3);  // and an overflow limiter per geometry
  CHECK(s.evictions > 0);
}

// A block of the pool is reused across geometries that share its size: here two limits
// with N = 10 on one resource, 1 s and 10 ms resolution, in a registry of one limiter,
// so every switch recycles the block. A lock-free reader that matched the 1 s key can
// then read an epoch written at 10 ms: epoch x resolution would overflow 64 bits unless
// the read path's arithmetic wraps (UBSan checks it); the result must be discarded.
TEST_CASE_FIXTURE(Fixture, "records recycled across geometries under lock-free readers") {
  Engine engine(options(1));
  const Limit coarse(1, 10s, 1s);
  const Limit fine(1, 100ms, 10ms);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  // The writer starts once every reader is reading, however slow a busy machine is to
  // start them. (Before, it checked that the readers had read at all: one first scheduled
  // after the writer's last call would not have.)
  std::latch reading(3);
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      (void)engine.try_acquire(7, coarse);
      reading.count_down();
      while (!stop) (void)engine.try_acquire(7, coarse);
    });
  }
  reading.wait();
  for (int i = 0; i < 300000; ++i) {
    // Each window has emptied by the next call: a limiter that still counts would not
    // be evicted to make room.
    clock->advance(11s);
    (void)engine.try_acquire(7, i % 2 == 0 ? coarse : fine);
  }
  stop = true;
  for (auto& t : readers) t.join();
  // (Recycled either way: evicted empty, or, when a reader's count kept the coarse one
  // alive, evicted live; under ASan about half were live.)
  const Stats s = engine.stats();
  CHECK(s.evictions + s.evictions_active > 100000);
  // (A limiter a reader's count keeps alive is evicted live for the other, or, where it
  // cannot be, the other goes to its overflow limiter: at most the one limiter and an
  // overflow limiter per geometry. Seen once under ASan: 3.)
  CHECK(engine.stats().limiters <= 3);
}

TEST_CASE_FIXTURE(Fixture, "through the store seam, engines merge each other's counts") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit limit(10, 1s, 100ms);
  const std::uint64_t r = hash("tenant");
  for (int i = 0; i < 5; ++i) CHECK(a.try_acquire(r, limit, 1).allowed);
  // b has counted nothing yet: it admits, and the reply (6) replaces its own count (1).
  const Decision first = b.try_acquire(r, limit, 1);
  CHECK(first.allowed);
  CHECK(first.remaining == 4);
  for (int i = 0; i < 4; ++i) CHECK(b.try_acquire(r, limit, 1).allowed);
  const int calls = shared->calls;
  // Full everywhere now; b's rejections are decided locally, without the store.
  for (int i = 0; i < 100; ++i) CHECK_FALSE(b.try_acquire(r, limit, 1).allowed);
  CHECK(shared->calls == calls);
  // a has not heard of b's requests yet (that is the boundary read's job): its own view
  // allows one more, but the shared counts do not: the write refuses it, and a learns
  // the whole window from the reply.
  const int before = shared->calls;
  const Decision late = a.try_acquire(r, limit, 1);
  CHECK_FALSE(late.allowed);
  CHECK(late.remaining == 0);
  CHECK(late.retry_after > 0ns);
  CHECK(shared->calls == before + 1);
  CHECK_FALSE(a.try_acquire(r, limit, 1).allowed);
  CHECK(shared->calls == before + 1);  // now decided locally
  // The refused write was given back: the shared count holds the ten admitted.
  CHECK(shared->total() == 10);

  // A store that cannot be reached leaves local decisions, marked degraded.
  shared->down = true;
  clock->advance(2s);
  const Decision d = a.try_acquire(r, limit, 1);
  CHECK(d.allowed);
  CHECK(d.degraded);
  CHECK(a.stats().degraded == 1);
}

TEST_CASE_FIXTURE(
    Fixture, "an admission stands on its own write's shared counts, whatever was merged since") {
  // Seen on two servers sharing a global limit (26 and 27 admitted of 25): a write whose
  // shared counts were over the limit, merged after another thread's reply had already
  // raised the local window as high, changed nothing and was taken as admitted.
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit limit(3, 10s, 1s);
  const std::uint64_t r = hash("global");
  CHECK(a.try_acquire(r, limit, 0).remaining == 3);  // a knows the limiter, empty
  for (int i = 0; i < 3; ++i) CHECK(b.try_acquire(r, limit, 1).allowed);  // a has not heard
  // a's first request writes (the shared count becomes 4); before its reply is merged,
  // another of a's threads writes (5), is refused by its reply and takes its count back.
  bool nested = false;
  Decision later;
  shared->after_add = [&] {
    if (nested) return;
    nested = true;
    later = a.try_acquire(r, limit, 1);
    nested = false;
  };
  const Decision first = a.try_acquire(r, limit, 1);
  shared->after_add = nullptr;
  CHECK_FALSE(later.allowed);
  CHECK_FALSE(first.allowed);  // its write made 4 of 3
  CHECK(shared->total() == 3);
  CHECK_FALSE(a.try_acquire(r, limit, 1).allowed);
}

TEST_CASE_FIXTURE(Fixture, "reset forgets a resource's counts, here and in the store") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  const Limit login(3, 60s, 6s);
  const std::uint64_t r = hash("alice");
  for (int i = 0; i < 3; ++i) CHECK(a.try_acquire(r, login, 1).allowed);
  clock->advance(7s);  // the counts span two subintervals
  CHECK_FALSE(a.try_acquire(r, login, 1).allowed);
  // Another resource and another limit on alice are untouched.
  CHECK(a.try_acquire(hash("bob"), login, 2).allowed);
  CHECK(a.try_acquire(r, Limit(5, 60s, 6s), 2).allowed);
  CHECK(a.reset(r, login));
  CHECK(shared->total() == 4);  // bob's 2 and the other limit's 2
  const Decision fresh = a.try_acquire(r, login, 1);
  CHECK(fresh.allowed);
  CHECK(fresh.remaining == 2);
  CHECK(a.try_acquire(hash("bob"), login, 1).remaining == 0);
  // Unreachable: this engine's counts go, and the call says the shared ones did not.
  shared->down = true;
  CHECK_FALSE(a.reset(r, login));
  CHECK(a.try_acquire(r, login, 3).allowed);  // (degraded, local policy)
}

TEST_CASE_FIXTURE(Fixture, "refund gives counts back, newest first, never below zero") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  const Limit limit(10, 10s, 1s);
  const std::uint64_t r = hash("worker");
  CHECK(a.try_acquire(r, limit, 4).allowed);
  clock->advance(1s);
  CHECK(a.try_acquire(r, limit, 6).allowed);
  CHECK_FALSE(a.try_acquire(r, limit, 1).allowed);
  CHECK(a.refund(r, limit, 7) == 7);  // 6 from this subinterval, 1 from the one before
  CHECK(shared->total() == 3);
  CHECK(a.try_acquire(r, limit, 0).remaining == 7);
  CHECK(a.refund(r, limit, 100) == 3);  // what there was
  CHECK(shared->total() == 0);
  CHECK(a.try_acquire(r, limit, 0).remaining == 10);
  CHECK(a.refund(hash("nobody"), limit, 5) == 0);
}

TEST_CASE_FIXTURE(Fixture, "reset and refund in local mode") {
  Engine engine(options());
  const Limit limit(2, 1s, 100ms);
  CHECK(engine.try_acquire("k", limit, 2).allowed);
  CHECK(engine.refund("k", limit) == 1);
  CHECK(engine.try_acquire("k", limit).allowed);
  CHECK_FALSE(engine.try_acquire("k", limit).allowed);
  CHECK(engine.reset("k", limit));
  CHECK(engine.try_acquire("k", limit, 2).allowed);
}

TEST_CASE_FIXTURE(Fixture,
                  "the store's bookkeeping goes with an engine's first write in a subinterval") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit limit(1000, 1s, 100ms);
  for (int i = 0; i < 5; ++i) REQUIRE(a.try_acquire(1, limit, 1).allowed);
  CHECK(shared->first_writes == 1);
  (void)a.try_acquire(1, limit, 0);  // a question writes nothing
  for (int i = 0; i < 5; ++i) REQUIRE(b.try_acquire(1, limit, 1).allowed);
  CHECK(shared->first_writes == 2);  // b's first, for b
  for (int i = 0; i < 3; ++i) REQUIRE(a.try_acquire(2, limit, 1).allowed);
  CHECK(shared->first_writes == 3);  // another limiter
  clock->advance(100ms);             // the next subinterval
  for (int i = 0; i < 3; ++i) REQUIRE(a.try_acquire(1, limit, 1).allowed);
  CHECK(shared->first_writes == 4);
  CHECK(shared->calls.load() == 16);  // every admission, and no question on a warm limiter
  // A failed write is no bookkeeping done: the next write in the epoch is a first again.
  clock->advance(100ms);
  shared->down = true;
  CHECK(a.try_acquire(1, limit, 1).degraded);
  shared->down = false;
  REQUIRE(a.try_acquire(1, limit, 1).allowed);
  CHECK(shared->first_writes == 6);
}

TEST_CASE_FIXTURE(Fixture,
                  "a limiter evicted while its read is in flight: decided from the reply") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore other(options(), std::make_unique<FakeStore>(shared));
  // One limiter at most. A question (cost 0) about a cold limiter reads the shared
  // window while its own window is empty: a new limiter may evict it meanwhile (one that
  // counted could not be evicted).
  detail::EngineCore engine(options(1), std::make_unique<FakeStore>(shared));
  const Limit limit(3, 1s, 100ms);
  for (int i = 0; i < 3; ++i) REQUIRE(other.try_acquire(1, limit, 1).allowed);
  bool evicted = false;
  shared->during_add = [&] {
    if (evicted) return;
    evicted = true;
    REQUIRE(engine.try_acquire(2, limit, 1).allowed);
  };
  const Decision d = engine.try_acquire(1, limit, 0);
  CHECK(evicted);
  CHECK(d.allowed);
  CHECK(d.remaining == 0);  // from the shared window the read returned: 3 of 3
  CHECK(engine.stats().evictions == 1);
  shared->during_add = nullptr;
}

TEST_CASE_FIXTURE(Fixture, "a cold limiter warms up from its first write or question") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit limit(10, 1s, 100ms);
  for (int i = 0; i < 7; ++i) CHECK(a.try_acquire(1, limit, 1).allowed);
  // A question (cost 0) about a limiter b has never seen is answered from the shared
  // counts: one round trip, which also warms the limiter.
  const int before = shared->calls;
  const Decision asked = b.try_acquire(1, limit, 0);
  CHECK(asked.allowed);
  CHECK(asked.remaining == 3);
  CHECK(shared->calls == before + 1);
  CHECK(b.stats().warm_starts == 1);
  // Now warm: the next question is local.
  CHECK(b.try_acquire(1, limit, 0).remaining == 3);
  CHECK(shared->calls == before + 1);

  // A handle's limiter starts cold too: its first decision reaches the store and takes in
  // the shared window (a's 7) with its own write.
  auto [shard, ref] = b.pin(2, limit);
  for (int i = 0; i < 4; ++i) CHECK(a.try_acquire(2, limit, 1).allowed);
  const Decision through_handle = b.try_acquire(*shard, ref, limit, 1);
  CHECK(through_handle.allowed);
  CHECK(through_handle.remaining == 5);
  CHECK(b.stats().warm_starts == 2);
  detail::EngineCore::unpin(*shard, ref);

  // A store that fails the warm start: counted, and the decision is degraded.
  shared->down = true;
  const Decision failed = b.try_acquire(3, limit, 1);
  CHECK(failed.degraded);
  CHECK(b.stats().warm_start_failures == 1);
}

TEST_CASE_FIXTURE(Fixture, "with a store, a limiter evicted while it counts is read back from it") {
  // Engines of one limiter each: a spent client's limiter is pushed out by new ones, and,
  // made again cold, its first write reads the store's counts back: still spent, on
  // either engine. No ghost is kept: the store has the counts.
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(1), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(1), std::make_unique<FakeStore>(shared));
  const Limit limit(5, 1s, 100ms);
  for (int i = 0; i < 5; ++i) REQUIRE(a.try_acquire(1, limit, 1).allowed);
  for (std::uint64_t r = 100; r < 120; ++r) {
    CHECK(a.try_acquire(r, limit, 1).allowed);
    CHECK(b.try_acquire(r + 1000, limit, 1).allowed);
  }
  CHECK(a.stats().evictions_active == 20);
  CHECK(a.stats().overflowed + b.stats().overflowed == 0);
  CHECK_FALSE(a.try_acquire(1, limit, 1).allowed);
  CHECK_FALSE(b.try_acquire(1, limit, 1).allowed);
  CHECK(a.stats().memory == b.stats().memory);  // (no ghost table)
}

TEST_CASE_FIXTURE(Fixture, "with a store, eviction still follows recent use") {
  // A hot limiter used in every subinterval must outlive a stream of one-off ones.
  auto shared = std::make_shared<SharedCounts>();
  // (A one-off limiter counts for 11 subintervals: with the hot one, and the new one,
  // 13 at a time.)
  detail::EngineCore engine(options(16), std::make_unique<FakeStore>(shared));
  const Limit limit(1000, 1s, 100ms);
  for (std::uint64_t i = 0; i < 200; ++i) {
    clock->advance(100ms);
    REQUIRE(engine.try_acquire(1, limit, 1).allowed);
    REQUIRE(engine.try_acquire(1000 + i, limit, 1).allowed);
  }
  const Stats s = engine.stats();
  CHECK(s.evictions == 200 + 1 - 16);
  CHECK(s.overflowed == 0);
  // Each one-off limiter warmed up once, and the hot one only at the start.
  CHECK(s.warm_starts == 200 + 1);
}

}  // namespace ratewin::test

namespace ratewin::test {
namespace {

TEST_CASE_FIXTURE(Fixture, "try_acquire_all admits only when every limit admits") {
  Engine engine(options());
  const Limit per_second(3, 1s, 100ms);
  const Limit per_minute(100, 60s, 6s);
  const Limit tight(2, 1s, 100ms);
  const Acquisition both[] = {{hash("key"), per_second}, {hash("endpoint"), tight}};
  Decision out[2];
  CHECK(engine.try_acquire_all(both, out) == 2);
  CHECK(out[0].allowed);
  CHECK(out[0].remaining == 2);
  CHECK(out[1].remaining == 1);
  CHECK(engine.try_acquire_all(both, out) == 2);
  // `tight` is full: refused before anything is counted, so "key" keeps its one left.
  CHECK(engine.try_acquire_all(both, out) == 1);
  CHECK_FALSE(out[1].allowed);
  CHECK(out[1].retry_after > 0ns);
  // Not decided (the refusal came from the pre-check): described, nothing counted.
  CHECK(out[0].allowed);
  CHECK(out[0].limit == 3);
  CHECK(out[0].remaining == 1);
  CHECK(engine.try_acquire("key", per_second, 0).remaining == 1);

  // Several windows on one key: the per-minute limit is not charged by refused requests.
  const Acquisition windows[] = {{hash("k2"), per_second}, {hash("k2"), per_minute}};
  for (int i = 0; i < 3; ++i) CHECK(engine.try_acquire_all(windows, out) == 2);
  for (int i = 0; i < 5; ++i) CHECK(engine.try_acquire_all(windows, out) == 0);
  CHECK(engine.try_acquire("k2", per_minute, 0).remaining == 97);

  // A cost larger than any limit's max can never pass.
  const Acquisition heavy[] = {{hash("k3"), per_minute, 5}, {hash("k3"), per_second, 4}};
  CHECK(engine.try_acquire_all(heavy, out) == 1);
  CHECK(out[1].retry_after == Decision::kNever);
  CHECK(engine.try_acquire("k3", per_minute, 0).remaining == 100);

  // Both windows full: the refusal reported is the one that lasts longest.
  const Limit two_per_minute(2, 60s, 6s);
  const Acquisition both_full[] = {{hash("k4"), per_second}, {hash("k4"), two_per_minute}};
  for (int i = 0; i < 2; ++i) CHECK(engine.try_acquire_all(both_full, out) == 2);
  CHECK(engine.try_acquire("k4", per_second, 1).allowed);  // per_second now full too
  CHECK(engine.try_acquire_all(both_full, out) == 1);
  CHECK(out[1].retry_after > 50s);
  CHECK_FALSE(out[0].allowed);  // its own refusal, not the one reported
  CHECK(out[0].limit == 3);

  Decision too_few[1];
  CHECK_THROWS_AS(engine.try_acquire_all(both, too_few), std::invalid_argument);
  CHECK(engine.try_acquire_all({}, too_few) == 0);
}

TEST_CASE_FIXTURE(Fixture, "a refused try_acquire_all describes every other limit as it stands") {
  Engine engine(options());
  const Limit full(2, 60s, 6s);
  const Limit roomy(10, 1s, 100ms);
  const Limit shadow = Limit(1, 60s, 6s).with_mode(Mode::shadow);
  for (int i = 0; i < 2; ++i) REQUIRE(engine.try_acquire("full", full).allowed);
  REQUIRE(engine.try_acquire("roomy", roomy, 3).allowed);
  REQUIRE(engine.try_acquire("shadow", shadow).allowed);
  // 250 ms on: roomy's window must first move to a new subinterval to be read (its
  // three counts end their window 850 ms from now).
  clock->advance(250ms);
  const Stats before = engine.stats();

  // Refused on local counts, before anything is counted: the others are described, not
  // left empty.
  const Acquisition refused_first[] = {
      {hash("full"), full}, {hash("roomy"), roomy}, {hash("shadow"), shadow}};
  Decision out[3];
  REQUIRE(engine.try_acquire_all(refused_first, out) == 0);
  CHECK_FALSE(out[0].allowed);
  CHECK(out[0].retry_after > 50s);
  // roomy would admit the request: what it has left now (nothing of this call counted)
  // and when its window empties of its three counts.
  CHECK(out[1].allowed);
  CHECK_FALSE(out[1].would_reject);
  CHECK(out[1].limit == 10);
  CHECK(out[1].remaining == 7);
  CHECK(out[1].reset_after == 850ms);
  CHECK(out[1].retry_after == 0ns);
  // A limit in shadow over its own limit says so, as when it is decided.
  CHECK(out[2].allowed);
  CHECK(out[2].would_reject);
  CHECK(out[2].limit == 1);
  CHECK(out[2].retry_after > 50s);

  // Refused on local counts by a limit that had to move to a new subinterval first (so
  // after the limit before it was counted and given back): the limits after it are
  // described too.
  clock->advance(6s);  // `full`'s window is a subinterval on, still full
  const Acquisition refused_later[] = {
      {hash("other"), roomy}, {hash("full"), full}, {hash("roomy"), roomy}};
  REQUIRE(engine.try_acquire_all(refused_later, out) == 1);
  CHECK(out[0].allowed);
  CHECK(out[0].remaining == 10);  // given back
  CHECK_FALSE(out[1].allowed);
  CHECK(out[2].allowed);
  CHECK(out[2].limit == 10);
  CHECK(out[2].remaining == 10);  // roomy's counts have left its window
  CHECK(out[2].reset_after == 0ns);

  // Nothing was counted but the refusals (and the admission given back, as before).
  const Stats after = engine.stats();
  CHECK(after.rejected == before.rejected + 2);
  CHECK(after.allowed == before.allowed + 1);
  CHECK(after.would_reject == before.would_reject);
  CHECK(engine.try_acquire("roomy", roomy, 0).remaining == 10);
  CHECK(engine.try_acquire("other", roomy, 0).remaining == 10);
}

TEST_CASE_FIXTURE(Fixture, "a refused try_acquire_all gives each other refusing limit its own") {
  Engine engine(options());
  const Limit per_second(3, 1s, 100ms);
  const Limit per_minute(2, 60s, 6s);
  const Acquisition both[] = {{hash("k"), per_second}, {hash("k"), per_minute}};
  Decision out[2];
  for (int i = 0; i < 2; ++i) REQUIRE(engine.try_acquire_all(both, out) == 2);
  REQUIRE(engine.try_acquire("k", per_second).allowed);  // both full now
  // The longest wait is reported; the other limit's refusal is its own, not empty.
  REQUIRE(engine.try_acquire_all(both, out) == 1);
  CHECK(out[1].retry_after > 50s);
  CHECK_FALSE(out[0].allowed);
  CHECK(out[0].limit == 3);
  CHECK(out[0].retry_after > 0ns);
  CHECK(out[0].retry_after < 2s);
}

TEST_CASE_FIXTURE(Fixture, "try_acquire_all gives back what it counted when the store refuses") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit wide(10, 1s, 100ms);
  const Limit narrow(2, 1s, 100ms);
  // b fills `narrow` in the store; a has not seen it (no boundary read has run).
  CHECK(b.try_acquire(hash("narrow"), narrow, 2).allowed);
  const Acquisition items[] = {{hash("wide"), wide}, {hash("narrow"), narrow}};
  Decision out[2];
  // a's own counts admit both; the store refuses `narrow` (the warm start brings back
  // b's counts), so `wide` is given back, locally and in the store.
  CHECK(a.try_acquire_all(items, out) == 1);
  CHECK_FALSE(out[1].allowed);
  CHECK(out[0].remaining == 10);
  CHECK(a.try_acquire(hash("wide"), wide, 0).remaining == 10);
  std::uint64_t stored = 0;
  for (const auto& [k, count] : shared->counts)
    if (std::get<0>(k) == hash("wide")) stored += count;
  CHECK(stored == 0);
  // And the next request is refused without a write.
  const int calls = shared->calls;
  CHECK(a.try_acquire_all(items, out) == 1);
  CHECK(shared->calls == calls);
}

}  // namespace
TEST_CASE_FIXTURE(Fixture, "try_acquire_all sends its limits' shared writes in one batch") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit per_second(3, 1s, 100ms);
  const Limit per_minute(100, 60s, 1s);
  const std::vector<Acquisition> group = {{1, per_second}, {1, per_minute}, {2, per_second}};
  std::vector<Decision> out(group.size());
  CHECK(a.try_acquire_all(group, out) == group.size());
  CHECK(shared->batches == 1);  // one call to the store for the three writes
  CHECK(shared->batched == 3);
  CHECK(shared->calls == 3);
  for (const Decision& d : out) CHECK(d.allowed);
  // b has used resource 2's per-second limit up: a's next group is refused by the
  // shared counts (after its writes), and what the others counted is given back.
  for (int i = 0; i < 2; ++i) REQUIRE(b.try_acquire(2, per_second, 1).allowed);
  CHECK(a.try_acquire_all(group, out) == 2);
  CHECK(shared->batches == 2);
  CHECK_FALSE(out[2].allowed);
  CHECK(out[0].remaining == 2);  // given back: 1 of 3 used
  CHECK(out[1].remaining == 99);
  CHECK(shared->total() == 3 + 2);  // the first group, and b's two; the refused group left nothing
  // A limit refused by the local counts sends nothing at all.
  const int calls = shared->calls;
  CHECK(a.try_acquire_all(group, out) == 2);
  CHECK(shared->calls == calls);
}

}  // namespace ratewin::test

namespace ratewin::test {

// A token bucket and a sliding log through every decision path of the engine (the cached
// rejection, the lock-free read, the locked path, a handle), against the pure model.
// `make_limit` makes a random limit; `Model` is the pure algorithm over storage of its own,
// with evaluate(t, cost, out) and add(t, cost).
template <class Model, class MakeLimit>
void engine_matches_model(Fixture& f, MakeLimit make_limit) {
  std::mt19937_64 rng(5);
  for (int trace = 0; trace < 30; ++trace) {
    Engine engine(f.options());
    const Limit limit = make_limit(rng);
    LimiterHandle handle = engine.limiter("r", limit);
    Model model(limit);
    for (int i = 0; i < 2000; ++i) {
      switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
        case 0:
          f.clock->advance(
              std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
          break;
        case 1:
        case 2:
          f.clock->advance(
              std::chrono::microseconds(std::uniform_int_distribution<int>(0, 30000)(rng)));
          break;
        default:
          break;  // same instant: repeated requests hit the cached rejection
      }
      const int shape = std::uniform_int_distribution<int>(0, 9)(rng);
      const std::uint64_t cost = shape == 0 ? 0 : shape == 1 ? 2 : shape == 2 ? limit.burst() + 1 : 1;
      const std::int64_t now = f.clock->now().count();
      Decision want;
      model.evaluate(now, cost, want);
      if (want.allowed && cost != 0) model.add(now, cost);
      const Decision got =
          i % 3 == 0 ? handle.try_acquire(cost) : engine.try_acquire("r", limit, cost);
      CAPTURE(trace);
      CAPTURE(i);
      REQUIRE(got.allowed == want.allowed);
      REQUIRE(got.limit == want.limit);
      REQUIRE(got.remaining == want.remaining);
      REQUIRE(got.reset_after == want.reset_after);
      REQUIRE(got.retry_after == want.retry_after);
    }
  }
}

TEST_CASE_FIXTURE(Fixture, "token bucket: engine decisions equal the pure bucket's") {
  engine_matches_model<BucketModel>(*this, [](std::mt19937_64& rng) {
    return Limit(std::uniform_int_distribution<std::uint64_t>(1, 50)(rng), 1s)
        .with_algorithm(Algorithm::token_bucket)
        .with_burst(std::uniform_int_distribution<std::uint64_t>(1, 60)(rng));
  });
}

TEST_CASE_FIXTURE(Fixture, "sliding log: engine decisions equal the pure log's") {
  engine_matches_model<LogModel>(*this, [](std::mt19937_64& rng) {
    return Limit(std::uniform_int_distribution<std::uint64_t>(1, 50)(rng),
                 std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 1500)(rng)))
        .with_algorithm(Algorithm::sliding_log);
  });
}

TEST_CASE_FIXTURE(Fixture, "sliding log of the largest max: a unit per entry, refund and reset") {
  Engine engine(options());
  const Limit limit = Limit(Limit::kMaxLogCount, 1s).with_algorithm(Algorithm::sliding_log);
  for (std::uint64_t i = 0; i < Limit::kMaxLogCount; ++i) {
    REQUIRE(engine.try_acquire("big", limit).allowed);
    clock->advance(100us);
  }
  const Decision refused = engine.try_acquire("big", limit);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 1s - Limit::kMaxLogCount * 100us);  // when the first leaves
  clock->advance(refused.retry_after - 1ns);
  CHECK_FALSE(engine.try_acquire("big", limit).allowed);
  clock->advance(1ns);
  CHECK(engine.try_acquire("big", limit).allowed);
  CHECK_FALSE(engine.try_acquire("big", limit).allowed);
  // A refund takes the newest entries back, however many there are.
  CHECK(engine.refund("big", limit, 3) == 3);
  CHECK(engine.try_acquire("big", limit, 0).remaining == 3);
  CHECK(engine.reset("big", limit));
  CHECK(engine.try_acquire("big", limit, 0).remaining == Limit::kMaxLogCount);
}

TEST_CASE_FIXTURE(Fixture,
                  "token bucket: engines sharing a store admit exactly what one bucket does") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  // 10 per second, room for 5 at once.
  const Limit limit = Limit(10, 1s).with_algorithm(Algorithm::token_bucket).with_burst(5);
  const std::uint64_t r = hash("tenant");
  int admitted = 0;
  for (int i = 0; i < 4; ++i) admitted += a.try_acquire(r, limit, 1).allowed ? 1 : 0;
  // b knows nothing yet: it asks the store, which admits one and refuses the next.
  const Decision last = b.try_acquire(r, limit, 1);
  CHECK(last.allowed);
  CHECK(last.remaining == 0);
  const int before = shared->calls;
  const Decision refused = b.try_acquire(r, limit, 1);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_after == 100ms);
  CHECK(shared->calls == before);  // decided locally: b learned the shared TAT
  // a thinks it has room for one more; the store refuses, and a learns.
  const Decision late = a.try_acquire(r, limit, 1);
  CHECK_FALSE(late.allowed);
  CHECK(late.retry_after == 100ms);
  CHECK(shared->calls == before + 1);
  CHECK_FALSE(a.try_acquire(r, limit, 1).allowed);
  CHECK(shared->calls == before + 1);
  CHECK(admitted == 4);
  // 250 ms later, 2.5 units have refilled: two pass, in all.
  clock->advance(250ms);
  int later = 0;
  for (int i = 0; i < 3; ++i) later += a.try_acquire(r, limit, 1).allowed ? 1 : 0;
  for (int i = 0; i < 3; ++i) later += b.try_acquire(r, limit, 1).allowed ? 1 : 0;
  CHECK(later == 2);

  // try_acquire_all gives a bucket's count back when another limit refuses.
  const Limit none = Limit(1, 1s);
  CHECK(a.try_acquire(hash("other"), none, 1).allowed);
  clock->advance(1s);  // the bucket is full again; "other" is still full
  CHECK(a.try_acquire(hash("other"), none, 1).allowed == false);
  const Acquisition both[] = {{r, limit}, {hash("other"), none}};
  Decision out[2];
  CHECK(a.try_acquire_all(both, out) == 1);
  Decision peek = b.try_acquire(r, limit, 0);
  CHECK(peek.remaining == 5);  // nothing left counted in the shared bucket

  // refund and reset.
  CHECK(a.try_acquire(r, limit, 3).allowed);
  CHECK(a.refund(r, limit, 2) == 2);
  CHECK(b.try_acquire(r, limit, 0).remaining == 4);
  CHECK(a.reset(r, limit));
  CHECK(b.try_acquire(r, limit, 0).remaining == 5);
  CHECK(a.try_acquire(r, limit, 0).remaining == 5);

  // An unreachable store: the failure policy decides, on local state.
  shared->down = true;
  for (int i = 0; i < 5; ++i) {
    const Decision local = a.try_acquire(r, limit, 1);
    CHECK(local.allowed);
    CHECK(local.degraded);
  }
  CHECK_FALSE(a.try_acquire(r, limit, 1).allowed);
  const Decision closed = b.try_acquire(r, limit.with_failure_policy(FailurePolicy::closed), 1);
  CHECK_FALSE(closed.allowed);
  CHECK(closed.degraded);
}

}  // namespace ratewin::test

namespace ratewin::test {
namespace {

// Shadow mode: a limit in shadow decides and counts as if it enforced, but never refuses.
TEST_CASE_FIXTURE(Fixture, "a limit in shadow decides and counts as the same limit enforcing") {
  const std::vector<Limit> limits = {
      Limit(20, 1s, 100ms),
      Limit(20, 1s, 100ms).with_algorithm(Algorithm::strict_window),
      Limit(20, 1s).with_algorithm(Algorithm::fixed_window),
      Limit(20, 1s).with_algorithm(Algorithm::token_bucket, 5),
      Limit(20, 1s).with_algorithm(Algorithm::sliding_log),
  };
  for (const Limit& enforcing : limits) {
    CAPTURE(enforcing.to_string());
    Engine engine(options());
    const Limit shadow = enforcing.with_mode(Mode::shadow);
    CHECK(shadow.to_string() == enforcing.to_string() + " shadow");
    CHECK(shadow.scope() == enforcing.scope());  // a switch of mode keeps the counts
    std::mt19937_64 rng(7);
    std::uint64_t would_reject = 0;
    for (int i = 0; i < 3000; ++i) {
      clock->advance(std::chrono::microseconds(rng() % 40'000));
      const std::uint64_t cost = rng() % 4;
      const Decision e = engine.try_acquire("enforced", enforcing, cost);
      const Decision s = engine.try_acquire("shadowed", shadow, cost);
      REQUIRE(s.allowed);
      REQUIRE(s.would_reject == !e.allowed);
      REQUIRE_FALSE(e.would_reject);
      REQUIRE(s.remaining == e.remaining);
      REQUIRE(s.retry_after == e.retry_after);
      REQUIRE(s.reset_after == e.reset_after);
      REQUIRE(s.limit == e.limit);
      if (s.would_reject) ++would_reject;
    }
    CHECK(would_reject > 100);  // the traffic overloads the limit
    const Stats stats = engine.stats();
    CHECK(stats.would_reject == would_reject);
    CHECK(stats.rejected == would_reject);  // the enforcing limit's own refusals
    // Switched to enforce, the shadow limit's counts refuse as the enforcing one does.
    for (int i = 0; i < 50; ++i) {
      const Decision e = engine.try_acquire("enforced", enforcing);
      const Decision s = engine.try_acquire("shadowed", shadow.with_mode(Mode::enforce));
      REQUIRE(s.allowed == e.allowed);
      REQUIRE_FALSE(s.would_reject);
      REQUIRE(s.remaining == e.remaining);
    }
  }
}

TEST_CASE_FIXTURE(Fixture, "a limit in shadow never refuses a group, and counts only with it") {
  Engine engine(options());
  const Limit enforced(3, 1s, 100ms);
  const Limit shadow = Limit(1, 1s, 100ms).with_mode(Mode::shadow);
  const Acquisition group[] = {{hash("key"), shadow}, {hash("key"), enforced}};
  Decision out[2];
  // The first request fits both; the next two fit only the enforcing limit.
  CHECK(engine.try_acquire_all(group, out) == 2);
  CHECK_FALSE(out[0].would_reject);
  for (int i = 0; i < 2; ++i) {
    CHECK(engine.try_acquire_all(group, out) == 2);
    CHECK(out[0].allowed);
    CHECK(out[0].would_reject);
    CHECK(out[0].remaining == 0);
    CHECK(out[1].allowed);
  }
  CHECK(engine.try_acquire("key", enforced, 0).remaining == 0);
  // The enforcing limit refuses: the shadow one is not counted, and is not reported; its
  // decision says it would have refused too (not counted in the stats either).
  CHECK(engine.try_acquire_all(group, out) == 1);
  CHECK_FALSE(out[1].allowed);
  CHECK(out[0].allowed);
  CHECK(out[0].would_reject);
  CHECK(engine.stats().would_reject == 2);

  // A shadow limit that would admit is counted with the group, and not when an enforcing
  // limit refuses it.
  const Limit roomy = Limit(10, 1s, 100ms).with_mode(Mode::shadow);
  const Acquisition second[] = {{hash("k2"), roomy}, {hash("k2"), enforced, 3}};
  CHECK(engine.try_acquire_all(second, out) == 2);
  CHECK(out[0].remaining == 9);
  CHECK(engine.try_acquire_all(second, out) == 1);  // enforced is full
  CHECK(engine.try_acquire("k2", roomy, 0).remaining == 9);
}

TEST_CASE_FIXTURE(Fixture, "a shadow limit refused by the store's counts is allowed and gives its count back") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore a(options(), std::make_unique<FakeStore>(shared));
  detail::EngineCore b(options(), std::make_unique<FakeStore>(shared));
  const Limit enforced(2, 1s, 100ms);
  const Limit shadow = enforced.with_mode(Mode::shadow);
  CHECK(b.try_acquire(hash("r"), enforced, 2).allowed);
  // a's own counts admit; the store's refuse: the shadow limit reports it, uncounted.
  const Decision d = a.try_acquire(hash("r"), shadow, 1);
  CHECK(d.allowed);
  CHECK(d.would_reject);
  CHECK(shared->total() == 2);
  // The same in a group with an enforcing limit that admits: the group is admitted.
  const Limit wide(100, 1s, 100ms);
  const Acquisition group[] = {{hash("r"), shadow}, {hash("w"), wide}};
  Decision out[2];
  CHECK(a.try_acquire_all(group, out) == 2);
  CHECK(out[0].would_reject);
  CHECK(out[1].allowed);
  CHECK(shared->total() == 3);
  // A shadow limit that admits, counted in the store, is given back when the store's
  // counts refuse an enforcing limit of its group.
  const Limit roomy = Limit(100, 1s, 100ms).with_mode(Mode::shadow);
  CHECK(b.try_acquire(hash("n"), enforced, 2).allowed);  // a has not seen "n" yet
  const Acquisition refused[] = {{hash("s"), roomy}, {hash("n"), enforced}};
  CHECK(a.try_acquire_all(refused, out) == 1);
  CHECK(out[0].allowed);
  CHECK_FALSE(out[0].would_reject);
  CHECK(out[0].remaining == 100);
  CHECK(shared->total() == 5);
  CHECK(a.try_acquire(hash("s"), roomy, 0).remaining == 100);
}

}  // namespace
}  // namespace ratewin::test

namespace ratewin::test {
namespace {

// FailurePolicy::partitioned: while the store is unreachable, a node's share of the limit.
TEST_CASE_FIXTURE(Fixture, "partitioned: a node admits its share of the limit while the store is away") {
  auto shared = std::make_shared<SharedCounts>();
  std::vector<std::string> warnings;
  Options o = options();
  o.logger = [&](LogLevel level, std::string_view m) {
    if (level == LogLevel::warning) warnings.emplace_back(m);
  };
  detail::EngineCore engine(o, std::make_unique<FakeStore>(shared));
  const Limit limit = Limit(100, 1s, 100ms).with_failure_policy(FailurePolicy::partitioned);
  const auto admitted = [&](std::uint64_t resource, const Limit& l, int tries) {
    int n = 0;
    for (int i = 0; i < tries; ++i) {
      const Decision d = engine.try_acquire(resource, l, 1);
      CHECK(d.degraded);
      if (d.allowed) ++n;
    }
    return n;
  };
  shared->unreachable = true;
  // Before the live count was ever read: as local, said once.
  CHECK(admitted(1, limit, 150) == 100);
  CHECK(admitted(2, limit, 1) == 1);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("decide as local") != std::string::npos);
  // Four nodes live: a quarter each, from this node's own counts of the window.
  shared->live = 4;
  CHECK(admitted(3, limit, 50) == 25);
  const Decision refused = engine.try_acquire(3, limit, 1);
  CHECK(refused.limit == 25);
  CHECK(refused.retry_after > 0ns);
  CHECK(admitted(2, limit, 50) == 24);  // (one counted above)
  clock->advance(1100ms);
  CHECK(admitted(3, limit, 50) == 25);  // the next window
  // Counts made before the outage weigh: 20 already in the window leave 5.
  shared->unreachable = false;
  for (int i = 0; i < 20; ++i) CHECK(engine.try_acquire(4, limit, 1).allowed);
  shared->unreachable = true;
  CHECK(admitted(4, limit, 50) == 5);
  // Once the store is back, the whole limit again.
  shared->unreachable = false;
  clock->advance(1100ms);
  int back = 0;
  for (int i = 0; i < 150; ++i) back += engine.try_acquire(5, limit, 1).allowed ? 1 : 0;
  CHECK(back == 100);
  CHECK(warnings.size() == 1);
}

TEST_CASE_FIXTURE(Fixture, "partitioned: share, token buckets, groups, and closed before the count") {
  auto shared = std::make_shared<SharedCounts>();
  shared->unreachable = true;
  Options o = options();
  o.partition_share = 2.0;
  o.partitioned_unknown = FailurePolicy::closed;
  o.logger = [](LogLevel, std::string_view) {};
  detail::EngineCore engine(o, std::make_unique<FakeStore>(shared));
  const Limit limit = Limit(100, 1s, 100ms).with_failure_policy(FailurePolicy::partitioned);
  // Never read: closed.
  const Decision closed = engine.try_acquire(1, limit, 1);
  CHECK_FALSE(closed.allowed);
  CHECK(closed.degraded);
  shared->live = 8;
  int n = 0;
  for (int i = 0; i < 50; ++i) n += engine.try_acquire(2, limit, 1).allowed ? 1 : 0;
  CHECK(n == 25);  // 100 x 2.0 / 8
  // A token bucket: its rate and its burst in proportion (burst 40 -> 10, 100/s -> 25/s).
  const Limit bucket = Limit(100, 1s)
                           .with_algorithm(Algorithm::token_bucket, 40)
                           .with_failure_policy(FailurePolicy::partitioned);
  n = 0;
  for (int i = 0; i < 50; ++i) n += engine.try_acquire(3, bucket, 1).allowed ? 1 : 0;
  CHECK(n == 10);
  const Decision empty = engine.try_acquire(3, bucket, 1);
  CHECK(empty.retry_after == 40ms);  // one unit of 25 per second
  // In a group, each limit its share; more nodes than max: at least 1 each.
  shared->live = 1000;
  const Acquisition group[] = {{4, limit}, {4, Limit(1000, 1s, 100ms)}};
  Decision out[2];
  CHECK(engine.try_acquire_all(group, out) == 2);
  CHECK(out[0].limit == 1);
  CHECK(engine.try_acquire_all(group, out) == 0);
  CHECK(engine.options().partition_share == 2.0);
}

TEST_CASE_FIXTURE(Fixture, "partitioned: for a window after an outage, what nodes admitted on their own counts") {
  auto shared = std::make_shared<SharedCounts>();
  detail::EngineCore engine(options(), std::make_unique<FakeStore>(shared));
  const Limit limit = Limit(100, 1s, 100ms).with_failure_policy(FailurePolicy::partitioned);
  shared->live = 4;
  // This node admitted 10 on its own while the store was away, which the store is back
  // without: for the window that holds them, it keeps to its quarter (25), counting
  // what it admits now as well, while the store's counts decide too.
  shared->unreachable = true;
  shared->down = true;  // (what is written meanwhile is lost)
  for (int i = 0; i < 10; ++i) REQUIRE(engine.try_acquire(1, limit, 1).allowed);
  shared->unreachable = false;
  shared->down = false;
  shared->back_for = 0;
  int n = 0;
  Decision last;
  for (int i = 0; i < 80; ++i) {
    last = engine.try_acquire(1, limit, 1);
    n += last.allowed ? 1 : 0;
  }
  CHECK(n == 15);
  CHECK_FALSE(last.degraded);
  CHECK(last.limit == 25);
  CHECK(shared->total() == 15);  // written to the store as usual
  // Past the window of its own admissions, the share still applies while the other nodes
  // may not be back (3 s beyond the window): what it admits now counts against it.
  clock->advance(1100ms);
  n = 0;
  for (int i = 0; i < 150; ++i) n += engine.try_acquire(1, limit, 1).allowed ? 1 : 0;
  CHECK(n == 25);
  // One that admitted a quarter on its own has nothing left for the window.
  shared->unreachable = true;
  shared->down = true;
  for (int i = 0; i < 25; ++i) REQUIRE(engine.try_acquire(6, limit, 1).allowed);
  shared->unreachable = false;
  shared->down = false;
  const Decision full = engine.try_acquire(6, limit, 1);
  CHECK_FALSE(full.allowed);
  CHECK(full.retry_after > 0ns);
  CHECK(full.retry_after <= 1s);
  // A limit under another policy is not held back.
  const Limit local = Limit(100, 1s, 100ms);
  n = 0;
  for (int i = 0; i < 150; ++i) n += engine.try_acquire(2, local, 1).allowed ? 1 : 0;
  CHECK(n == 100);
  // Once they are surely back, the whole limit (the store's counts decide).
  shared->back_for = 4'100'000'000;
  n = 0;
  for (int i = 0; i < 150; ++i) n += engine.try_acquire(3, limit, 1).allowed ? 1 : 0;
  CHECK(n == 100);
}

TEST_CASE("partitioned's options are checked") {
  Options o;
  o.partition_share = 0;
  CHECK_THROWS_WITH_AS(Engine{o}, doctest::Contains("partition_share"), std::invalid_argument);
  o.partition_share = 1.0;
  o.partitioned_unknown = FailurePolicy::open;
  CHECK_THROWS_WITH_AS(Engine{o}, doctest::Contains("partitioned_unknown"), std::invalid_argument);
}

}  // namespace
}  // namespace ratewin::test
