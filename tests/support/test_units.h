// Small things every suite says the same way: times on the injected clocks (nanoseconds
// as int64) and fresh key prefixes, so that engines of one test do not meet another's
// counts in a shared redis-server.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ratewin::test {

inline constexpr std::int64_t kMs = 1'000'000;
inline constexpr std::int64_t kSec = 1'000 * kMs;

// `stem` followed by a number not handed out before in this process.
inline std::string fresh_prefix(std::string_view stem) {
  static int next = 0;
  std::string prefix(stem);
  prefix += std::to_string(++next);
  return prefix;
}

}  // namespace ratewin::test
