// K engines offering one resource requests at a steady pace together, for the Redis
// suites' accuracy checks.
#pragma once

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ratewin/clock.h"
#include "ratewin/engine.h"

namespace ratewin::test {

// What steady_admissions saw from `skip` on: the times (SystemClock) of the admissions,
// in any order, and the longest any engine's thread went between two of its requests. A
// busy machine that leaves threads waiting for their turn (the test's, and the engines'
// own) bunches the demand and the engines' work, and the room that builds up meanwhile is
// admitted at once, in one subinterval: checks that assume steady demand apply only when
// the longest gap was short.
struct Overload {
  std::vector<std::int64_t> admitted;
  std::chrono::nanoseconds longest_gap{0};
};

// The longest time from `from` on between two consecutive of `times` (nanoseconds, in
// any order).
inline std::chrono::nanoseconds longest_gap(std::vector<std::int64_t> times, std::int64_t from) {
  std::sort(times.begin(), times.end());
  std::int64_t longest = 0;
  for (std::size_t k = 1; k < times.size(); ++k)
    if (times[k] > from) longest = std::max(longest, times[k] - std::max(times[k - 1], from));
  return std::chrono::nanoseconds(longest);
}

// The first `count` of `engines` each offer `resource` a request every `gap` for `duration`,
// all starting together.
inline Overload steady_admissions(const std::vector<std::unique_ptr<Engine>>& engines,
                                  std::size_t count, const std::string& resource,
                                  const Limit& limit, std::chrono::nanoseconds gap,
                                  std::chrono::nanoseconds duration,
                                  std::chrono::nanoseconds skip) {
  std::vector<std::vector<std::int64_t>> admitted(count);
  std::vector<std::vector<std::int64_t>> offered(count);
  std::barrier start(static_cast<std::ptrdiff_t>(count));
  std::vector<std::thread> threads;
  const std::int64_t from = SystemClock::read() + skip.count();
  for (std::size_t i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      const auto end = std::chrono::steady_clock::now() + duration;
      while (std::chrono::steady_clock::now() < end) {
        offered[i].push_back(SystemClock::read());
        if (engines[i]->try_acquire(resource, limit).allowed)
          admitted[i].push_back(SystemClock::read());
        std::this_thread::sleep_for(gap);
      }
    });
  }
  for (auto& t : threads) t.join();
  Overload out;
  for (std::size_t i = 0; i < count; ++i) {
    for (const std::int64_t t : admitted[i])
      if (t >= from) out.admitted.push_back(t);
    out.longest_gap = std::max(out.longest_gap, longest_gap(std::move(offered[i]), from));
  }
  return out;
}

}  // namespace ratewin::test
