// ratewin-bench local: the in-process decision path against an in-memory floor, and
// the memory each limiter costs.
#include <cxxopts.hpp>

#include <unistd.h>
#include <array>
#include <fstream>
#include <mutex>
#include <random>

#include "bench.h"
#include "ratewin/engine.h"
#include "ratewin_internal/introspection.h"

namespace ratewin::bench {
namespace {

using namespace std::chrono_literals;

std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// RSS growth of holding `count` limiters of `subintervals` buckets, per limiter.
double bytes_per_limiter(std::uint64_t count, std::uint32_t subintervals) {
  const std::uint64_t before = resident_bytes();
  double per = 0;
  {
    Options options;
    options.max_limiters = count;
    Engine engine(options);
    const Limit limit(100, std::chrono::seconds(subintervals), 1s);
    std::uint64_t resource = 0;
    // Shards fill unevenly: keep adding distinct resources until every one is full.
    while (engine.stats().limiters < count) {
      for (int i = 0; i < 10000; ++i) keep(engine.try_acquire(resource++, limit));
    }
    per = static_cast<double>(resident_bytes() - before) / static_cast<double>(count);
  }
  return per;
}

std::vector<std::uint64_t> random_resources(std::uint64_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> v(count);
  for (auto& r : v) r = rng();
  return v;
}

}  // namespace

int run_local(const cxxopts::ParseResult& args) {
  const int runs = args["runs"].as<int>();
  const double run_ms = args["run-ms"].as<double>();
  const auto resources = args["resources"].as<std::uint64_t>();
  const auto limiters = args["limiters"].as<std::uint64_t>();
  const auto subintervals = args["subintervals"].as<std::uint32_t>();

  // Memory first, in a fresh heap.
  const double memory = bytes_per_limiter(limiters, subintervals);

  const std::shared_ptr<const Clock> clock = system_clock();
  Engine engine;
  // The rejecting hot resource: 1000 per second at 100 ms resolution, hammered by
  // millions of calls per second, so it stays in steady overload (about 1 call in 10^4
  // is admitted, as the window slides).
  const Limit strict(1000, 1s, 100ms);
  const Limit loose(Limit::kMaxCount, 60s, 5s);  // never full during a run
  const std::uint64_t hot_reject = hash("hot:reject");
  const std::uint64_t hot_allow = hash("hot:allow");
  LimiterHandle reject_handle = engine.limiter(hot_reject, strict);
  LimiterHandle allow_handle = engine.limiter(hot_allow, loose);

  // Distinct resources: one set of resources, visited in a fixed random order; with
  // two threads each visits its own half, so both runs touch the same memory.
  const std::vector<std::uint64_t> all = random_resources(resources, 1);
  const std::vector<std::vector<std::uint64_t>> halves = {
      std::vector<std::uint64_t>(all.begin(),
                                 all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2)),
      std::vector<std::uint64_t>(all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2),
                                 all.end())};
  const Limit one(1, 60s, 5s);
  Engine rejecting_engine;  // every resource in it already holds its one request
  for (const auto r : all) keep(rejecting_engine.try_acquire(r, one));

  // The floor: what any in-memory limiter pays at least per decision. With two threads
  // each has its own, which shows how far this machine lets independent work scale.
  struct alignas(64) Floor {
    std::mutex mutex;
    std::uint64_t counts[16] = {};
    std::uint64_t sum = 0;
  };
  Floor floors[2];

  std::vector<Case> cases;
  auto floor_case = [&](int threads) {
    cases.push_back(
        {"floor: clock read + lock + counter update", threads, [&, threads](std::uint64_t n) {
           return run_threads(threads, n, [&](int t, std::uint64_t k) {
             Floor& f = floors[t];
             std::uint64_t admitted = 0;
             for (std::uint64_t i = 0; i < k; ++i) {
               const std::int64_t now = clock->now().count();
               std::lock_guard lock(f.mutex);
               f.counts[(now >> 20) & 15] += 1;
               admitted += (f.sum++ < ~std::uint64_t{0}) ? 1U : 0U;
             }
             keep(admitted);
           });
         }});
  };
  floor_case(1);
  auto hot = [&](const char* name, int threads, auto call) {
    cases.push_back({name, threads, [&, call](std::uint64_t n) {
                       return run_threads(threads, n, [&](int, std::uint64_t k) {
                         std::uint64_t allowed = 0;
                         for (std::uint64_t i = 0; i < k; ++i) allowed += call().allowed ? 1U : 0U;
                         keep(allowed);
                       });
                     }});
  };
  hot("reject, hot resource, Engine::try_acquire", 1,
      [&] { return engine.try_acquire(hot_reject, strict); });
  hot("reject, hot resource, LimiterHandle", 1, [&] { return reject_handle.try_acquire(); });
  // Cost 2: no cached rejection applies, every call evaluates the window.
  hot("reject, hot resource, cost 2 (full evaluation)", 1,
      [&] { return engine.try_acquire(hot_reject, strict, 2); });
  hot("allow, hot resource, Engine::try_acquire", 1,
      [&] { return engine.try_acquire(hot_allow, loose); });
  hot("allow, hot resource, LimiterHandle", 1, [&] { return allow_handle.try_acquire(); });
  hot("reject, hot resource, Engine::try_acquire", 2,
      [&] { return engine.try_acquire(hot_reject, strict); });
  auto distinct = [&](const char* name, int threads, Engine& target, const Limit& limit) {
    cases.push_back({name, threads, [&, threads](std::uint64_t n) {
                       return run_threads(threads, n, [&](int t, std::uint64_t k) {
                         const auto& set = threads == 1 ? all : halves[static_cast<std::size_t>(t)];
                         std::uint64_t allowed = 0;
                         std::size_t j = 0;
                         for (std::uint64_t i = 0; i < k; ++i) {
                           allowed += target.try_acquire(set[j], limit).allowed ? 1U : 0U;
                           if (++j == set.size()) j = 0;
                         }
                         keep(allowed);
                       });
                     }});
  };
  distinct("reject, distinct resources", 1, rejecting_engine, one);
  distinct("reject, distinct resources", 2, rejecting_engine, one);
  distinct("allow, distinct resources", 1, engine, loose);
  distinct("allow, distinct resources", 2, engine, loose);
  floor_case(2);
  // A request counted against two limits, the first one full (a tier's per-second limit
  // spent, its per-minute one not): a rejection as the server and Envoy's RLS make it.
  const Acquisition two_limits[] = {{hot_reject, strict}, {hot_allow, loose}};
  hot("reject, two limits, Engine::try_acquire_all", 1, [&] {
    std::array<Decision, 2> out;
    const std::size_t refused = engine.try_acquire_all(two_limits, out);
    return out[refused < out.size() ? refused : 0];
  });

  measure(cases, runs, run_ms);

  const Case& floor_case_1 = cases[0];
  std::printf(
      "ratewin-bench local: medians of %d rounds; x floor = median of the per-round ratios"
      " of ns per call to the floor's\n\n",
      runs);
  std::printf("%-48s %7s %9s %10s %8s\n", "case", "threads", "ns/call", "Mcalls/s", "x floor");
  for (const auto& c : cases) {
    // ns/call: wall time per call as each thread sees it; Mcalls/s: all threads.
    std::printf("%-48s %7d %9.1f %10.2f %8.2f\n", c.name.c_str(), c.threads, c.ns(), c.mcalls(),
                c.ratio_to(floor_case_1));
  }
  const double reject_ratio = cases[1].ratio_to(floor_case_1);
  const double reject_handle_ratio = cases[2].ratio_to(floor_case_1);
  // Throughput scaling: 2-thread calls/s over 1-thread calls/s = 2 / (ns ratio).
  auto scaling = [&](std::size_t two_threads, std::size_t one_thread) {
    return 2.0 / cases[two_threads].ratio_to(cases[one_thread]);
  };
  const double scale_reject = scaling(8, 7);
  const double scale_allow = scaling(10, 9);
  const double scale_floor = scaling(11, 0);
  const double budget = 64.0 + 4.0 * subintervals;
  std::printf("\nsummary\n");
  std::printf(
      "  rejecting, hot resource, 1 thread: %.2fx floor via try_acquire, %.2fx via a handle,"
      " %.2fx evaluating every call (target <= 1.5x): %s\n",
      reject_ratio, reject_handle_ratio, cases[3].ratio_to(floor_case_1),
      verdict(reject_ratio <= 1.5 && reject_handle_ratio <= 1.5).c_str());
  std::printf(
      "  distinct resources, 2 threads / 1 thread throughput: %.2fx rejecting, %.2fx allowing"
      " (target >= 1.7x; the floor itself scales %.2fx here): %s\n",
      scale_reject, scale_allow, scale_floor,
      verdict(scale_reject >= 1.7 && scale_allow >= 1.7).c_str());
  std::printf(
      "  memory: %.1f bytes per limiter with %llu limiters of %u subintervals (RSS delta;"
      " record %zu B; target <= 64 + 4 x %u = %.0f B): %s\n",
      memory, static_cast<unsigned long long>(limiters), subintervals,
      internal::limiter_record_bytes(subintervals, false), subintervals, budget,
      verdict(memory <= budget).c_str());
  std::printf("  machine: %u hardware threads\n", std::thread::hardware_concurrency());
  return 0;
}

}  // namespace ratewin::bench
