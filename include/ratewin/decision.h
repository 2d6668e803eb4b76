// ratewin/decision.h: the answer to one request.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ratewin {
inline namespace v1 {

// The outcome of Engine::try_acquire. All durations are relative to the engine's clock
// reading used for the decision, and exact for the sliding-window model: nothing is
// rounded to "the end of the window".
struct Decision {
  // retry_after of a request that can never pass (its cost exceeds the limit's max).
  static constexpr std::chrono::nanoseconds kNever = std::chrono::nanoseconds::max();

  // The request was admitted and its cost counted. (In a request that
  // Engine::try_acquire_all refused: this limit would have admitted it; nothing was
  // counted.)
  bool allowed = false;
  // The shared store was unreachable; the decision followed the limit's failure policy.
  bool degraded = false;
  // A limit in shadow (Mode::shadow) would have refused: the request is allowed and was
  // not counted, and the other fields are the refusal's (remaining, and retry_after:
  // when the request would have passed). Never set for an enforcing limit.
  bool would_reject = false;
  // The limit's max.
  std::uint64_t limit = 0;
  // Units that could still be admitted now (after this request, when it was allowed).
  std::uint64_t remaining = 0;
  // Time until the window holds nothing of the counts made so far (0 if it is empty).
  std::chrono::nanoseconds reset_after{0};
  // 0 when allowed (but would_reject). Otherwise the earliest time from now at which the same request
  // would be allowed if nothing else arrived; kNever if it can never be allowed.
  std::chrono::nanoseconds retry_after{0};

  // False when the request's cost exceeds the limit's max: retrying cannot help.
  bool can_ever_pass() const noexcept { return retry_after != kNever; }
};

// One HTTP response header field.
struct HeaderField {
  std::string_view name;  // a static string
  std::string value;

  friend bool operator==(const HeaderField&, const HeaderField&) = default;
};

// The response headers that tell a client where it stands, in this order:
//   X-RateLimit-Limit      the limit's max
//   X-RateLimit-Remaining  units that could still be admitted now
//   X-RateLimit-Reset      seconds until the window holds nothing of the counts made so
//                          far (a delay, not a date), rounded up
//   Retry-After            only when rejected and retrying can help: seconds until the
//                          same request would pass, rounded up, at least 1
// Every value is a decimal integer. The HTTP server, the C ABI and the Python package
// all answer with these.
std::vector<HeaderField> headers(const Decision& decision);

// The same fields with their values as numbers, without allocating (for servers that
// write them straight into a response): fills `out` and returns how many there are.
struct NumericHeader {
  std::string_view name;  // a static string
  std::uint64_t value;
};
std::size_t numeric_headers(const Decision& decision, std::span<NumericHeader, 4> out) noexcept;

// A duration in whole seconds, rounded up (negative durations give 0), as HTTP headers
// carry delays.
std::uint64_t ceil_seconds(std::chrono::nanoseconds d) noexcept;

}  // namespace v1
}  // namespace ratewin
