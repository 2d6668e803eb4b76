// A cold burst over several engines admits exactly the limit (issue 41): K engines (1 to
// 4) of T threads each, synchronous and asynchronous calls, one new resource, a real
// redis-server, run many times with the interleavings shaken: the hand-offs between the
// engine and the store delayed at random (a store wrapped around the Redis store), the
// BITFIELD that counts a write split from the rest of it (redis/write_path.h,
// split_write_hook: other clients' commands then run in between, as Redis runs them when
// a pipeline reaches it in two reads), and each engine on a manual clock of its own,
// placed just before or just after a subinterval boundary (one may cross it mid-burst).
// The property, for every interleaving: the engines admit min(limit, requests) and the
// store holds exactly what they admitted, for each algorithm that promises it, and
// batched mode keeps its stated bound (README, "The bound": the limit plus 4K - 1).
//
// The number of runs: RATEWIN_EXACT_RUNS (default 60, a few seconds); the seed of their
// shapes: RATEWIN_EXACT_SEED (default: random, printed). For instance
//   RATEWIN_EXACT_RUNS=10000 build/tests/redis/ratewin_redis_tests --source-file='*/exact_test.cpp'
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_core.h"
#include "engine/store.h"
#include "eventually.h"
#include "ratewin/engine.h"
#include "redis/layout.h"
#include "redis/redis_store.h"
#include "redis/write_path.h"
#include "redis_server.h"

// (A namespace of its own: the suite is a unity build.)
namespace ratewin::test::cold_burst {
namespace {

using namespace std::chrono_literals;

// ---- Shaking the interleavings

// How much the current run shakes: the most a pause lasts (microseconds; 0: none), and
// how often a write is split (percent).
std::atomic<int> pause_us{0};
std::atomic<int> split_percent{0};

std::minstd_rand& thread_rng() {
  static std::atomic<std::uint32_t> seeds{std::random_device()()};
  thread_local std::minstd_rand rng(seeds.fetch_add(0x9e3779b9U, std::memory_order_relaxed));
  return rng;
}

// A pause of a random kind and length: none, a yield, a short spin or a sleep.
void pause() {
  const int most = pause_us.load(std::memory_order_relaxed);
  if (most == 0) return;
  std::minstd_rand& rng = thread_rng();
  switch (rng() % 4) {
    case 0:
      return;
    case 1:
      std::this_thread::yield();
      return;
    case 2: {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 20);
      while (std::chrono::steady_clock::now() < until) {
      }
      return;
    }
    default:
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<unsigned>(most)));
  }
}

// split_write_hook: between a write's count and the rest of it, sometimes a pause.
void split_pause() {
  if (static_cast<int>(thread_rng()() % 100) < split_percent.load(std::memory_order_relaxed))
    pause();
}

// The Redis store, with a pause at each hand-off between it and the engine: before a
// write goes out (after the local decision), before its reply is merged, before a
// give-back, and on the way to and back from the store's I/O thread.
class HandOffStore final : public detail::Store {
 public:
  explicit HandOffStore(std::unique_ptr<detail::Store> inner) : inner_(std::move(inner)) {}
  bool add(const detail::StoreWrite& write, std::span<std::uint64_t> counts) override {
    pause();
    const bool written = inner_->add(write, counts);
    pause();
    return written;
  }
  void add_all(std::span<const detail::StoreWrite> writes,
               std::span<const std::span<std::uint64_t>> counts, std::span<bool> written) override {
    pause();
    inner_->add_all(writes, counts, written);
    pause();
  }
  void remove(const detail::StoreWrite& give_back) override {
    pause();
    inner_->remove(give_back);
  }
  std::string counts_key(const detail::LimiterKey& key) const override {
    return inner_->counts_key(key);
  }
  bool reset(const detail::LimiterKey& key) override { return inner_->reset(key); }
  bool available(std::uint64_t resource) const noexcept override {
    return inner_->available(resource);
  }
  std::uint32_t live_nodes() const noexcept override { return inner_->live_nodes(); }
  std::int64_t back_for(std::uint64_t resource) const noexcept override {
    return inner_->back_for(resource);
  }
  std::int64_t clock_offset() const noexcept override { return inner_->clock_offset(); }
  std::chrono::nanoseconds retry_hint() const noexcept override { return inner_->retry_hint(); }
  void add_stats(Stats& stats) const override { inner_->add_stats(stats); }
  std::unique_ptr<detail::AsyncWriter> async_writer(uv_loop_s* loop) override {
    return inner_->async_writer(loop);
  }
  void write_async(std::span<const detail::StoreWrite> writes,
                   std::span<const std::span<std::uint64_t>> counts, std::span<bool> written,
                   std::function<void(detail::AsyncWriter&)> done) override {
    pause();
    inner_->write_async(writes, counts, written,
                        [done = std::move(done)](detail::AsyncWriter& writer) {
                          pause();
                          done(writer);
                        });
  }
  void shutdown() override { inner_->shutdown(); }

 private:
  std::unique_ptr<detail::Store> inner_;
};

// The store's calls back into the engine, which is made after the store.
struct Relay final : detail::SyncTarget {
  std::atomic<detail::SyncTarget*> to{nullptr};
  void take_activity(std::vector<detail::Activity>& out) override {
    if (detail::SyncTarget* t = to.load()) t->take_activity(out);
  }
  void merge(std::span<const detail::SharedCounts> windows) override {
    if (detail::SyncTarget* t = to.load()) t->merge(windows);
  }
};

// One engine on the Redis store (wrapped), with a manual clock of its own.
struct Node {
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  Relay relay;
  std::unique_ptr<detail::EngineCore> engine;

  Node(const std::string& url, const std::string& prefix, WriteMode mode) {
    Options o;
    o.redis = url;
    o.key_prefix = prefix;
    o.clock = clock;
    o.sync_clock = false;  // the manual clock is the only time
    // No decision may be degraded: deadlines that only a hang reaches.
    o.connect_timeout = kHang;
    o.command_timeout = kHang;
    o.write_mode = mode;
    o.logger = [](LogLevel, std::string_view) {};
    auto store = std::make_unique<detail::RedisStore>(o, clock, relay);
    engine =
        std::make_unique<detail::EngineCore>(o, std::make_unique<HandOffStore>(std::move(store)));
    relay.to = engine.get();
  }
  ~Node() { engine.reset(); }  // (before the relay)
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
};

// ---- One run

const std::array<Algorithm, 5> kAlgorithms{Algorithm::sliding_window, Algorithm::strict_window,
                                           Algorithm::fixed_window, Algorithm::token_bucket,
                                           Algorithm::sliding_log};

constexpr std::chrono::milliseconds kInterval = 60s;
// The boundary the clocks are placed around: a whole window (so a fixed window's start).
constexpr std::int64_t kBoundaryNs = std::int64_t{1'700'000'040} * 1'000'000'000;

struct Shape {
  Algorithm algorithm = Algorithm::sliding_window;
  bool batched = false;
  int engines = 1;
  int threads = 1;        // per engine
  int async_percent = 0;  // of the calls
  std::uint64_t limit = 1;
  std::uint64_t requests = 1;
  std::vector<std::int64_t> clocks;  // per engine, ns
  std::int64_t crossing = 0;         // engine 0's clock after its thread's `cross_at`-th call
  int cross_at = -1;                 // -1: no clock moves
  int pause = 0;
  int split = 0;

  std::string describe() const {
    std::ostringstream s;
    s << algorithm_name(algorithm) << (batched ? " batched" : " sync") << ", " << engines << " x "
      << threads << " threads, " << async_percent << "% async, limit " << limit << ", " << requests
      << " requests, clocks";
    for (const std::int64_t c : clocks) s << ' ' << (c - kBoundaryNs) / 1'000'000 << "ms";
    if (cross_at >= 0) s << ", crossing to " << (crossing - kBoundaryNs) / 1'000'000 << "ms";
    s << ", pauses " << pause << " us, split " << split << "%";
    return s.str();
  }
};

Shape random_shape(std::mt19937_64& rng, bool batched) {
  auto pick = [&](std::int64_t from, std::int64_t to) {
    return std::uniform_int_distribution<std::int64_t>(from, to)(rng);
  };
  Shape s;
  s.algorithm = kAlgorithms[static_cast<std::size_t>(pick(0, kAlgorithms.size() - 1))];
  s.batched = batched;
  s.engines = static_cast<int>(pick(1, 4));
  s.threads = static_cast<int>(pick(1, 3));
  s.async_percent = static_cast<int>(std::array{0, 50, 100}[static_cast<std::size_t>(pick(0, 2))]);
  s.limit = static_cast<std::uint64_t>(pick(2, 40));
  // Mostly past the limit, sometimes short of it.
  s.requests =
      pick(0, 9) == 0
          ? static_cast<std::uint64_t>(pick(1, static_cast<std::int64_t>(s.limit)))
          : s.limit + static_cast<std::uint64_t>(pick(1, static_cast<std::int64_t>(s.limit)));
  const bool ring =
      s.algorithm == Algorithm::sliding_window || s.algorithm == Algorithm::strict_window;
  for (int k = 0; k < s.engines; ++k) {
    std::int64_t at = kBoundaryNs + 1'000'000'000;  // one time for all
    if (ring) {
      // Either side of the boundary: at it, a nanosecond, a millisecond or a second off.
      const std::int64_t off = std::array<std::int64_t, 4>{
          0, 1, 1'000'000, 1'000'000'000}[static_cast<std::size_t>(pick(0, 3))];
      at = kBoundaryNs + (pick(0, 1) == 0 ? -off : off);
    } else if (s.algorithm == Algorithm::fixed_window) {
      at = kBoundaryNs + pick(0, 59'999) * 1'000'000;  // anywhere in one fixed window
    }
    s.clocks.push_back(at);
  }
  if (ring && pick(0, 2) == 0) {
    // Engine 0 starts before the boundary and crosses it mid-burst.
    s.clocks[0] = kBoundaryNs - pick(1, 1'000'000);
    s.crossing = kBoundaryNs + pick(0, 1'000'000);
    s.cross_at = static_cast<int>(
        pick(0, static_cast<std::int64_t>(s.requests) / (s.engines * s.threads) + 1));
  }
  s.pause = static_cast<int>(std::array{0, 20, 200}[static_cast<std::size_t>(pick(0, 2))]);
  s.split = static_cast<int>(std::array{0, 50, 100}[static_cast<std::size_t>(pick(0, 2))]);
  return s;
}

Limit limit_of(const Shape& s) {
  const Limit base(s.limit, kInterval);
  return s.algorithm == Algorithm::sliding_window ? base : base.with_algorithm(s.algorithm);
}

// The asynchronous calls of a run still owed a callback.
struct Owed {
  std::mutex mutex;
  std::condition_variable done;
  int owed = 0;
  std::uint64_t admitted = 0;
  std::uint64_t degraded = 0;
  void add(int n) {
    std::lock_guard lock(mutex);
    owed += n;
  }
  void settle(bool allowed, bool was_degraded) {
    std::lock_guard lock(mutex);
    admitted += allowed ? 1 : 0;
    degraded += was_degraded ? 1 : 0;
    if (--owed == 0) done.notify_all();
  }
  bool wait() {
    std::unique_lock lock(mutex);
    return done.wait_for(lock, kHang, [&] { return owed == 0; });
  }
  std::pair<std::uint64_t, std::uint64_t> admitted_and_degraded() {
    std::lock_guard lock(mutex);
    return {admitted, degraded};
  }
};

// Waits until what the engine sent before on its I/O thread's connection has been
// answered (give-backs included, which go out without waiting): a write of its own on
// that connection, answered after them.
bool fence(detail::EngineCore& engine, std::uint64_t resource) {
  const std::array items{Acquisition{resource, Limit(1'000'000, kInterval)}};
  std::array<Decision, 1> out;
  // (Shared with the callback: should it come after a wait that gave up, it finds it.)
  const auto owed = std::make_shared<Owed>();
  owed->add(1);
  const std::size_t r = engine.try_acquire_all_async(
      items, out,
      [owed](std::size_t, std::span<const Decision> d) { owed->settle(d[0].allowed, false); });
  if (r != Engine::kPending) return true;  // (decided at once: nothing was written)
  return owed->wait();
}

// What the store holds for `resource` under `limit`, in units, as of `now`.
std::uint64_t held(const RedisServer& redis, detail::EngineCore& engine, std::uint64_t resource,
                   const Limit& limit, std::int64_t now) {
  const std::string key = engine.store_key(resource, limit);
  if (limit.algorithm() == Algorithm::sliding_log)
    return static_cast<std::uint64_t>(std::atoll(redis.command({"ZCARD", key}).c_str()));
  std::string value = redis.command({"GET", key});
  if (value == "(nil)") value.clear();
  if (limit.algorithm() == Algorithm::token_bucket) {
    // The TAT, as seconds and nanoseconds (big-endian): the units it holds past `now`.
    if (value.size() != 8) return 0;
    std::uint64_t s = 0;
    std::uint64_t ns = 0;
    for (int i = 0; i < 4; ++i)
      s = (s << 8) | static_cast<unsigned char>(value[static_cast<std::size_t>(i)]);
    for (int i = 4; i < 8; ++i)
      ns = (ns << 8) | static_cast<unsigned char>(value[static_cast<std::size_t>(i)]);
    const std::int64_t tat = static_cast<std::int64_t>(s * 1'000'000'000 + ns);
    const std::int64_t backlog = tat - now;
    return backlog <= 0 ? 0 : static_cast<std::uint64_t>(backlog / limit.emission_ns());
  }
  // Every epoch the window can hold, from the one after the boundary back.
  const detail::LimiterKey k = detail::LimiterKey::of(resource, limit);
  const std::int64_t r = k.resolution_ns();
  const std::int64_t newest = (now + r) / r;
  std::vector<std::uint64_t> counts(std::size_t{k.subintervals} + 1);
  detail::StoreLayout::decode(value, newest, k.subintervals, counts);
  std::uint64_t sum = 0;
  for (const std::uint64_t c : counts) sum += c;
  return sum;
}

struct Outcome {
  std::uint64_t admitted = 0;
  std::uint64_t degraded = 0;
  std::uint64_t held = 0;
  bool settled = true;  // every callback came, every fence was answered
};

Outcome run_once(const RedisServer& redis, std::vector<std::unique_ptr<Node>>& nodes,
                 const Shape& s, std::uint64_t resource, std::uint64_t fence_resource) {
  const Limit limit = limit_of(s);
  for (int k = 0; k < s.engines; ++k)
    nodes[static_cast<std::size_t>(k)]->clock->set(
        std::chrono::nanoseconds(s.clocks[static_cast<std::size_t>(k)]));
  pause_us = s.pause;
  split_percent = s.split;
  detail::split_write_hook = s.split > 0 ? &split_pause : nullptr;

  const auto owed = std::make_shared<Owed>();  // (shared with the callbacks, as in fence())
  std::atomic<std::uint64_t> admitted{0};
  std::atomic<std::uint64_t> degraded{0};
  const int callers = s.engines * s.threads;
  std::latch start(callers);
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c) {
    // Caller c's share of the requests.
    const std::uint64_t share =
        s.requests / static_cast<std::uint64_t>(callers) +
        (static_cast<std::uint64_t>(c) < s.requests % static_cast<std::uint64_t>(callers) ? 1 : 0);
    Node* const caller = nodes[static_cast<std::size_t>(c % s.engines)].get();
    threads.emplace_back([&, c, share, caller] {
      Node& node = *caller;
      std::minstd_rand& rng = thread_rng();
      start.arrive_and_wait();
      for (std::uint64_t i = 0; i < share; ++i) {
        if (c == 0 && static_cast<int>(i) == s.cross_at)
          node.clock->set(std::chrono::nanoseconds(s.crossing));
        if (static_cast<int>(rng() % 100) < s.async_percent) {
          const std::array items{Acquisition{resource, limit}};
          std::array<Decision, 1> out;
          owed->add(1);
          const std::size_t r = node.engine->try_acquire_all_async(
              items, out, [owed](std::size_t, std::span<const Decision> d) {
                owed->settle(d[0].allowed, d[0].degraded);
              });
          if (r != Engine::kPending) owed->settle(out[0].allowed, out[0].degraded);
        } else {
          const Decision d = node.engine->try_acquire(resource, limit, 1);
          admitted += d.allowed ? 1 : 0;
          degraded += d.degraded ? 1 : 0;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Outcome o;
  o.settled = owed->wait();
  detail::split_write_hook = nullptr;
  pause_us = 0;
  const auto [async_admitted, async_degraded] = owed->admitted_and_degraded();
  o.admitted = admitted + async_admitted;
  o.degraded = degraded + async_degraded;
  std::int64_t latest = 0;
  for (int k = 0; k < s.engines; ++k) {
    Node& node = *nodes[static_cast<std::size_t>(k)];
    if (s.batched) (void)node.engine->flush();  // what it admitted and has not written
    o.settled = fence(*node.engine, fence_resource) && o.settled;
    latest = std::max(latest, node.clock->now().count());
  }
  o.held = held(redis, *nodes[0]->engine, resource, limit, latest);
  return o;
}

std::uint64_t env_number(const char* name, std::uint64_t otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : otherwise;
}

}  // namespace

TEST_CASE("a cold burst over 1 to 4 engines admits exactly the limit, whatever the interleaving") {
  RedisServer redis;
  const auto runs = static_cast<int>(env_number("RATEWIN_EXACT_RUNS", 60));
  const std::uint64_t seed = env_number("RATEWIN_EXACT_SEED", std::random_device()());
  MESSAGE("runs " << runs << ", seed " << seed << " (RATEWIN_EXACT_RUNS, RATEWIN_EXACT_SEED)");
  std::mt19937_64 rng(seed);
  // Four engines of each mode, on two key prefixes (batched engines share their budgets
  // among the live engines of theirs).
  std::array<std::vector<std::unique_ptr<Node>>, 2> nodes;
  for (int mode = 0; mode < 2; ++mode) {
    for (int k = 0; k < 4; ++k)
      nodes[static_cast<std::size_t>(mode)].push_back(
          std::make_unique<Node>(redis.url(), mode == 0 ? "exact" : "exactb",
                                 mode == 0 ? WriteMode::sync : WriteMode::batched));
  }
  // Batched engines write as sync ones do until they have read how many engines share
  // the prefix: all four.
  for (auto& node : nodes[1])
    REQUIRE(eventually([&] { return node->engine->stats().live_nodes == 4; }));
  int failures = 0;
  // Runs and failures by algorithm, mode and split.
  std::map<std::string, std::pair<int, int>> tally;
  std::uint64_t next_resource = seed << 20;
  for (int run = 0; run < runs; ++run) {
    const bool batched = run % 4 == 3;
    std::vector<std::unique_ptr<Node>>& pool = nodes[batched ? 1 : 0];
    // Now and then a sync engine is new: its I/O thread's connection is not up yet.
    if (!batched && rng() % 16 == 0) {
      const std::size_t k = rng() % pool.size();
      pool[k] = std::make_unique<Node>(redis.url(), "exact", WriteMode::sync);
    }
    const Shape s = random_shape(rng, batched);
    const std::uint64_t resource = ++next_resource;
    const Outcome o = run_once(redis, pool, s, resource, ~resource);
    const std::uint64_t exact = std::min(s.limit, s.requests);
    // Batched: at most the limit plus 4K - 1 (K: the live engines, four), unless the
    // algorithm is one batched mode writes as sync mode does.
    const bool bounded = s.batched && (s.algorithm == Algorithm::sliding_window ||
                                       s.algorithm == Algorithm::fixed_window);
    const bool good =
        o.settled && o.degraded == 0 && o.held == o.admitted &&
        (bounded ? o.admitted <= std::min(s.requests, s.limit + 4 * 4 - 1) : o.admitted == exact);
    auto& [counted, failed] =
        tally[std::string(algorithm_name(s.algorithm)) + (s.batched ? " batched" : " sync") +
              ", split " + std::to_string(s.split) + "%"];
    ++counted;
    if (!good) {
      ++failed;
      ++failures;
      MESSAGE("run " << run << " (" << s.describe() << "): admitted " << o.admitted << " (exact: "
                     << exact << "), the store holds " << o.held << ", degraded " << o.degraded
                     << std::string(o.settled ? "" : ", a callback or a fence never came"));
    }
  }
  for (const auto& [shape, counts] : tally)
    MESSAGE(shape << ": " << counts.second << " of " << counts.first << " runs failed");
  MESSAGE(failures << " of " << runs << " runs failed");
  CHECK(failures == 0);
}

}  // namespace ratewin::test::cold_burst
