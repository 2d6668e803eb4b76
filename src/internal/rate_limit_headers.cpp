#include "ratewin_internal/rate_limit_headers.h"

#include <algorithm>
#include <charconv>

#include "core/int128.h"
#include "ratewin_internal/utf8.h"

namespace ratewin {
inline namespace v1 {
namespace internal {

namespace {

void append_decimal(std::string& out, std::uint64_t value) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, value);
  out.append(digits, r.ptr);
}

}  // namespace

void append_sf_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c >= 0x20 && c < 0x7f) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
      ++i;
      continue;
    }
    out += '?';
    i += std::max<std::size_t>(1, utf8_length(text, i));
  }
  out += '"';
}

std::uint64_t policy_window_seconds(const Limit& limit) noexcept {
  // ceil(interval_ms x burst / (max x 1000)): for every algorithm but the token bucket the
  // burst is max, and this is the interval. (The product can exceed 64 bits; the quotient
  // fits: a bucket's whole refill is at most Limit::kMaxResolution.)
  const auto interval_ms = static_cast<std::uint64_t>(limit.interval().count());
  return std::max<std::uint64_t>(
      1, detail::mul_div_ceil(interval_ms, limit.burst(), limit.max() * 1000));
}

void append_policy_head(std::string& out, std::string_view name) {
  append_sf_string(out, name);
  out += ";q=";
}

void append_policy_quota(std::string& out, std::uint64_t quota, std::uint64_t window) {
  append_decimal(out, quota);
  out += ";w=";
  append_decimal(out, window);
}

void append_policy_item(std::string& out, std::string_view name, std::uint64_t quota,
                        std::uint64_t window) {
  append_policy_head(out, name);
  append_policy_quota(out, quota, window);
}

void append_rate_limit_head(std::string& out, std::string_view name) {
  append_sf_string(out, name);
  out += ";r=";
}

void append_rate_limit_state(std::string& out, std::uint64_t remaining, std::uint64_t reset,
                             bool degraded) {
  append_decimal(out, remaining);
  out += ";t=";
  append_decimal(out, reset);
  if (degraded) out += ";degraded";
}

void append_rate_limit(std::string& out, std::string_view name, std::uint64_t remaining,
                       std::uint64_t reset, bool degraded) {
  append_rate_limit_head(out, name);
  append_rate_limit_state(out, remaining, reset, degraded);
}

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
