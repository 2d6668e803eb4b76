#include "ratewin/decision.h"

#include <array>

namespace ratewin {
inline namespace v1 {

std::uint64_t ceil_seconds(std::chrono::nanoseconds d) noexcept {
  if (d <= std::chrono::nanoseconds::zero()) return 0;
  constexpr std::int64_t kSecond = 1'000'000'000;
  const std::int64_t ns = d.count();
  return static_cast<std::uint64_t>(ns / kSecond + (ns % kSecond != 0 ? 1 : 0));
}

std::size_t numeric_headers(const Decision& decision, std::span<NumericHeader, 4> out) noexcept {
  out[0] = {"X-RateLimit-Limit", decision.limit};
  out[1] = {"X-RateLimit-Remaining", decision.remaining};
  out[2] = {"X-RateLimit-Reset", ceil_seconds(decision.reset_after)};
  if (decision.allowed || !decision.can_ever_pass()) return 3;
  const std::uint64_t retry = ceil_seconds(decision.retry_after);
  out[3] = {"Retry-After", retry == 0 ? 1 : retry};
  return 4;
}

std::vector<HeaderField> headers(const Decision& decision) {
  std::array<NumericHeader, 4> numeric;
  const std::size_t n = numeric_headers(decision, numeric);
  std::vector<HeaderField> fields;
  fields.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    fields.push_back({numeric[i].name, std::to_string(numeric[i].value)});
  return fields;
}

}  // namespace v1
}  // namespace ratewin
