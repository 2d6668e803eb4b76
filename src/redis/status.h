// How a call of the Redis store's transport or protocol ended.
#pragma once

#include <string>

#include "internal/ratewin_internal/outcome.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// The internal Status (ratewin_internal/outcome.h), under the name the store has always
// used for it.
using Status = internal::Status;

// The system's words for an errno value (strerror), for a Status' message.
std::string errno_text(int error);

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
