#include "redis/status.h"

#include <cstring>

namespace ratewin {
inline namespace v1 {
namespace internal {

// (Defined with the store, which is the one that reads Redis' error replies.)
Status Status::of_error_reply(std::string_view text) {
  const std::string message(text);
  const auto is = [&](std::string_view code) {
    return text.starts_with(code) && (text.size() == code.size() || text[code.size()] == ' ');
  };
  if (is("MOVED") || is("ASK")) return Status(Code::redirect, message);
  if (is("NOSCRIPT")) return Status(Code::noscript, message);
  if (is("TRYAGAIN")) return Status(Code::retry, message);
  // The server cannot serve now: a replica after a failover, still loading its data, its
  // master down, busy with a script, or a cluster down.
  if (is("READONLY") || is("LOADING") || is("MASTERDOWN") || is("BUSY") || is("CLUSTERDOWN"))
    return Status(Code::unavailable, message);
  // Credentials missing or refused (older servers say "invalid password").
  if (is("NOAUTH") || is("WRONGPASS") || text.find("invalid password") != std::string_view::npos ||
      text.find("invalid username-password") != std::string_view::npos) {
    return Status(Code::auth, message);
  }
  return Status(Code::refused, message);
}

}  // namespace internal

namespace detail {

std::string errno_text(int error) { return std::strerror(error); }

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
