// The IETF rate-limit fields (draft-ietf-httpapi-ratelimit-headers, structured fields of
// RFC 8941), formatted in one place for every surface that sends them: ratewin-server's
// HTTP answers, its RLS listener (--rls-headers ietf) and the Python middleware (through
// the extension). Each function appends to the caller's buffer and allocates nothing
// once the buffer has room. Part of the internal target ratewin::internal: not installed,
// no stability promise.
//
//   RateLimit-Policy: "name";q=<quota>;w=<window seconds>, "other";q=..;w=..
//   RateLimit: "name";r=<remaining>;t=<seconds to reset>[;degraded]
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace internal {

// A structured-field string: `text` quoted, with the quote and the backslash escaped.
// Only printable ASCII may appear in one: any other character becomes one "?" (a
// well-formed UTF-8 sequence as one, each byte that is not UTF-8 as one).
void append_sf_string(std::string& out, std::string_view text);

// RateLimit-Policy's w for a limit: the seconds in which it admits its quota q (its
// burst), rounded up, at least 1. A window's interval; a token bucket's refill of its
// whole burst, burst x interval / max, so that q / w is its rate. Computed exactly, in
// integers.
std::uint64_t policy_window_seconds(const Limit& limit) noexcept;

// One item of RateLimit-Policy, `"name";q=<quota>;w=<window>`, in two halves for a
// caller that keeps the first per limit: the head `"name";q=`, then `<quota>;w=<window>`.
void append_policy_item(std::string& out, std::string_view name, std::uint64_t quota,
                        std::uint64_t window);
void append_policy_head(std::string& out, std::string_view name);
void append_policy_quota(std::string& out, std::uint64_t quota, std::uint64_t window);

// RateLimit, `"name";r=<remaining>;t=<reset>` with `;degraded` when the decision was made
// without the shared store (the Python middleware says so there; ratewin-server in
// X-RateLimit-Policy), likewise in two halves: the head `"name";r=`, then the rest.
void append_rate_limit(std::string& out, std::string_view name, std::uint64_t remaining,
                       std::uint64_t reset, bool degraded);
void append_rate_limit_head(std::string& out, std::string_view name);
void append_rate_limit_state(std::string& out, std::uint64_t remaining, std::uint64_t reset,
                             bool degraded);

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
