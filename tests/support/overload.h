// K engines offering one resource requests at a steady pace together, for the Redis
// suites' accuracy checks.
#pragma once

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

// The first `count` of `engines` each offer `resource` a request every `gap` for `duration`,
// all starting together; returns the times (SystemClock) of the admissions made from
// `skip` after the start on, in any order.
inline std::vector<std::int64_t> steady_admissions(
    const std::vector<std::unique_ptr<Engine>>& engines, std::size_t count,
    const std::string& resource, const Limit& limit, std::chrono::nanoseconds gap,
    std::chrono::nanoseconds duration, std::chrono::nanoseconds skip) {
  std::vector<std::vector<std::int64_t>> admitted(count);
  std::barrier start(static_cast<std::ptrdiff_t>(count));
  std::vector<std::thread> threads;
  const std::int64_t from = SystemClock::read() + skip.count();
  for (std::size_t i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      const auto end = std::chrono::steady_clock::now() + duration;
      while (std::chrono::steady_clock::now() < end) {
        if (engines[i]->try_acquire(resource, limit).allowed)
          admitted[i].push_back(SystemClock::read());
        std::this_thread::sleep_for(gap);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::int64_t> out;
  for (const auto& a : admitted)
    for (const std::int64_t t : a)
      if (t >= from) out.push_back(t);
  return out;
}

}  // namespace ratewin::test
