// Shared pieces of ratewin-bench: timing runs, medians, and the result table.
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ratewin::bench {

// Keeps a value alive so the optimizer cannot drop the work that made it.
template <class T>
inline void keep(const T& value) {
  asm volatile("" : : "r,m"(value) : "memory");
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Runs body(thread_index, iterations) on `threads` threads started together and
// returns the wall time in nanoseconds from the common start to the last finish.
inline double run_threads(int threads, std::uint64_t iterations,
                          const std::function<void(int, std::uint64_t)>& body) {
  std::barrier start(threads + 1);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      start.arrive_and_wait();
      body(i, iterations);
    });
  }
  start.arrive_and_wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& t : pool) t.join();
  const auto t1 = std::chrono::steady_clock::now();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

// A measured case: `run(iterations)` performs that many calls per thread and returns
// the wall time in ns.
struct Case {
  Case(std::string case_name, int case_threads, std::function<double(std::uint64_t)> body)
      : name(std::move(case_name)), threads(case_threads), run(std::move(body)) {}

  std::string name;
  int threads = 1;
  std::function<double(std::uint64_t)> run;
  std::vector<double> ns_per_call;  // wall time / calls per thread, one per run
  std::uint64_t iterations = 0;

  double ns() const { return median(ns_per_call); }
  // Calls per second over all threads, in millions.
  double mcalls() const { return 1e3 * threads / ns(); }
  // Median over rounds of this case's time / `base`'s time in the same round: each
  // round runs all cases back to back, so the pair shares the machine's state then.
  double ratio_to(const Case& base) const {
    std::vector<double> r;
    for (std::size_t i = 0; i < ns_per_call.size() && i < base.ns_per_call.size(); ++i) {
      r.push_back(ns_per_call[i] / base.ns_per_call[i]);
    }
    return median(r);
  }
};

// Calibrates each case to about `target_ms` per run, then runs every case `runs` times,
// round-robin, so slow phases of a shared machine hit all cases alike.
inline void measure(std::vector<Case>& cases, int runs, double target_ms) {
  for (auto& c : cases) {
    std::uint64_t n = 1000;
    for (;;) {
      const double wall = c.run(n);
      if (wall >= target_ms * 1e6 / 4 || n >= (std::uint64_t{1} << 32)) {
        c.iterations = std::max<std::uint64_t>(
            1000, static_cast<std::uint64_t>(static_cast<double>(n) * target_ms * 1e6 / wall));
        break;
      }
      n *= 4;
    }
  }
  for (int r = 0; r < runs; ++r) {
    for (auto& c : cases)
      c.ns_per_call.push_back(c.run(c.iterations) / static_cast<double>(c.iterations));
  }
}

inline std::string verdict(bool ok) { return ok ? "meets target" : "MISSES target"; }

}  // namespace ratewin::bench
