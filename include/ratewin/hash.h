// ratewin/hash.h: naming resources.
#pragma once

#include <cstdint>
#include <string_view>

namespace ratewin {
inline namespace v1 {

// The 64-bit resource id of a name: XXH3-64 of its bytes with seed 0. The function is
// fixed (it names keys shared between processes and languages), so any XXH3
// implementation computes the same ids.
std::uint64_t hash(std::string_view name) noexcept;

}  // namespace v1
}  // namespace ratewin
