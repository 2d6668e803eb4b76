// The monotonic clock in nanoseconds, for the Redis store's timings and backoffs.
#pragma once

#include <chrono>
#include <cstdint>

namespace ratewin {
inline namespace v1 {
namespace detail {

inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
