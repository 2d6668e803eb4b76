// Exact sliding-window counts over event times, for checking what limiters admitted.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ratewin::test {

// The most events in any sliding window (t - interval, t] over the given event times
// (nanoseconds, in any order).
inline std::size_t max_in_window(std::vector<std::int64_t> times, std::int64_t interval) {
  std::sort(times.begin(), times.end());
  std::size_t best = 0;
  for (std::size_t lo = 0, hi = 0; hi < times.size(); ++hi) {
    while (times[hi] - times[lo] >= interval) ++lo;
    best = std::max(best, hi - lo + 1);
  }
  return best;
}

}  // namespace ratewin::test
