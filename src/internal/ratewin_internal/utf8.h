// UTF-8 as ratewin's own tools read it (the server's JSON and YAML, the IETF headers'
// names). Part of the internal target ratewin::internal: not installed, no stability
// promise.
#pragma once

#include <cstddef>
#include <string_view>

namespace ratewin {
inline namespace v1 {
namespace internal {

// Length of the well-formed UTF-8 sequence starting at s[i] (i < s.size()), 0 if there is
// none (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, truncated).
std::size_t utf8_length(std::string_view s, std::size_t i) noexcept;

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
