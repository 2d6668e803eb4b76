// murmur3's 64-bit finaliser: a bijection that spreads every input bit over the output.
#pragma once

#include <cstdint>

namespace ratewin {
inline namespace v1 {
namespace detail {

constexpr std::uint64_t fmix64(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
