// A request's cost on the unit tests' random traces.
#pragma once

#include <cstdint>
#include <random>

namespace ratewin::test {

// Mostly 1, sometimes 0 (a question), sometimes anything up to just past `most` (the
// most that can ever pass at once).
inline std::uint64_t random_cost(std::mt19937_64& rng, std::uint64_t most) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      return 0;
    case 1:
      return std::uniform_int_distribution<std::uint64_t>(0, most + 2)(rng);
    default:
      return 1;
  }
}

}  // namespace ratewin::test
