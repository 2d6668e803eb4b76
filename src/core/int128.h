// Exact wide arithmetic for the window math.
#pragma once

#include <cstdint>

namespace ratewin {
inline namespace v1 {
namespace detail {

// g++ and clang support 128-bit integers on every 64-bit target this project builds
// for; __extension__ keeps -Wpedantic quiet about it.
__extension__ typedef unsigned __int128 u128;

// floor(a * b / d) for d > 0 when the quotient fits in 64 bits.
inline std::uint64_t mul_div_floor(std::uint64_t a, std::uint64_t b, std::uint64_t d) noexcept {
  const u128 product = static_cast<u128>(a) * b;
  if ((product >> 64) == 0) return static_cast<std::uint64_t>(product) / d;
  return static_cast<std::uint64_t>(product / d);
}

// ceil(a * b / d) for d > 0 when the quotient fits in 64 bits.
inline std::uint64_t mul_div_ceil(std::uint64_t a, std::uint64_t b, std::uint64_t d) noexcept {
  const u128 product = static_cast<u128>(a) * b;
  if ((product >> 64) == 0) {
    const auto p = static_cast<std::uint64_t>(product);
    return p / d + (p % d != 0 ? 1 : 0);
  }
  return static_cast<std::uint64_t>(product / d + (product % d != 0 ? 1 : 0));
}

// Two's-complement wrapping arithmetic on 64-bit signed values: defined for any operands
// (C++20 defines the conversions), exact when nothing overflows. The lock-free read path
// uses it because on a torn read the values can be anything; its result is then
// discarded, but computing it must not be undefined behaviour.
inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
inline std::int64_t wrapping_mul(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
