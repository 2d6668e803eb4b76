#include "ratewin/hash.h"

#include <xxhash.h>

namespace ratewin {
inline namespace v1 {

std::uint64_t hash(std::string_view name) noexcept { return XXH3_64bits(name.data(), name.size()); }

}  // namespace v1
}  // namespace ratewin
