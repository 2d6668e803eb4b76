#include "ratewin/limit.h"

#include "core/mix.h"
#include "ratewin/hash.h"

#include <stdexcept>
#include <string>

namespace ratewin {
inline namespace v1 {
namespace {

std::string duration_text(std::int64_t ms) {
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("ratewin::Limit: " + what);
}

std::chrono::milliseconds default_resolution(std::chrono::milliseconds interval) {
  const std::int64_t ms = interval.count();
  if (ms <= 0) return interval;  // rejected by the main constructor with its message
  for (std::int64_t n = 10; n > 1; --n) {
    if (ms % n == 0) return std::chrono::milliseconds(ms / n);
  }
  return interval;
}

}  // namespace

Limit::Limit(std::uint64_t max, std::chrono::milliseconds interval,
             std::chrono::milliseconds resolution)
    : max_(max), resolution_ms_(resolution.count()), subintervals_(0) {
  if (max == 0) invalid("max must be at least 1");
  if (max > kMaxCount)
    invalid("max " + std::to_string(max) + " exceeds " + std::to_string(kMaxCount));
  if (interval.count() <= 0)
    invalid("interval must be positive, got " + std::to_string(interval.count()) + "ms");
  if (resolution.count() <= 0)
    invalid("resolution must be positive, got " + std::to_string(resolution.count()) + "ms");
  if (interval > kMaxInterval)
    invalid("interval " + duration_text(interval.count()) + " exceeds 366 days");
  if (resolution > kMaxResolution)
    invalid("resolution " + duration_text(resolution.count()) + " exceeds 4294967295ms");
  if (interval.count() % resolution.count() != 0) {
    invalid("resolution " + std::to_string(resolution.count()) + "ms does not divide interval " +
            std::to_string(interval.count()) + "ms");
  }
  const std::int64_t n = interval.count() / resolution.count();
  if (n > kMaxSubintervals) {
    invalid("interval / resolution = " + std::to_string(n) + " subintervals, more than " +
            std::to_string(kMaxSubintervals));
  }
  subintervals_ = static_cast<std::uint32_t>(n);
}

Limit::Limit(std::uint64_t max, std::chrono::milliseconds interval)
    : Limit(max, interval, default_resolution(interval)) {}

std::uint64_t Limit::scope() const noexcept {
  if (scope_ != 0) return scope_;
  // A limit's own scope: its max, mixed (murmur3's fmix64) so that it looks like no
  // named scope's id. Never 0 (0 is a fixed point of the mix, and max is at least 1).
  return detail::fmix64(max_ ^ 0x6f776e2073636f70ULL);  // "own scop"
}

Limit Limit::with_scope(std::string_view name) const noexcept {
  return with_scope_id(hash(name));
}

std::string Limit::to_string() const {
  return std::to_string(max_) + "/" + duration_text(interval().count()) + "@" +
         duration_text(resolution_ms_);
}

}  // namespace v1
}  // namespace ratewin
