// outcome.h: the one error convention inside ratewin (ratewin_internal/outcome.h;
// docs/architecture.md, "Errors, one convention"), named in the server's namespace. An
// action that can fail returns a Status (code `invalid` for bad input or settings); a call
// that makes something returns a Result<T>, the thing or the Status of why not. The
// messages are the words the server says (HTTP bodies, logs, flag errors); callers choose
// what to do (an HTTP status, an exit) by the code, never by the words.
#pragma once

#include <string>
#include <utility>

#include "ratewin_internal/outcome.h"

namespace ratewin::server {

using internal::Result;
using internal::Status;

// A problem with what was given (a request, a body, a setting): code `invalid`, `why`.
inline Status invalid(std::string why) { return Status(Status::Code::invalid, std::move(why)); }

}  // namespace ratewin::server
