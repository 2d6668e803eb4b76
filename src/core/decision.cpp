#include "ratewin/decision.h"

namespace ratewin {
inline namespace v1 {

std::uint64_t ceil_seconds(std::chrono::nanoseconds d) noexcept {
  if (d <= std::chrono::nanoseconds::zero()) return 0;
  constexpr std::int64_t kSecond = 1'000'000'000;
  const std::int64_t ns = d.count();
  return static_cast<std::uint64_t>(ns / kSecond + (ns % kSecond != 0 ? 1 : 0));
}

std::vector<HeaderField> headers(const Decision& decision) {
  std::vector<HeaderField> fields;
  fields.reserve(4);
  fields.push_back({"X-RateLimit-Limit", std::to_string(decision.limit)});
  fields.push_back({"X-RateLimit-Remaining", std::to_string(decision.remaining)});
  fields.push_back({"X-RateLimit-Reset", std::to_string(ceil_seconds(decision.reset_after))});
  if (!decision.allowed && decision.can_ever_pass()) {
    const std::uint64_t retry = ceil_seconds(decision.retry_after);
    fields.push_back({"Retry-After", std::to_string(retry == 0 ? 1 : retry)});
  }
  return fields;
}

}  // namespace v1
}  // namespace ratewin
