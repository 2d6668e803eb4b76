// Redis Cluster's hash slots.
#pragma once

#include <cstdint>
#include <string_view>

namespace ratewin {
inline namespace v1 {
namespace detail {

inline constexpr std::uint32_t kClusterSlots = 16384;

// The hash slot of a key, as Redis Cluster computes it: CRC16 (XMODEM) of the key's hash
// tag, modulo 16384. The hash tag is what lies between the first '{' and the first '}'
// after it, if that is not empty; otherwise the whole key.
std::uint16_t key_slot(std::string_view key) noexcept;

// The slot of the window keys of `resource` (their hash tag is its 16 hex digits), without
// building a key.
std::uint16_t resource_slot(std::uint64_t resource) noexcept;

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
