// ratewin/limit.h: what a limit is.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ratewin {
inline namespace v1 {

// What a limit does while the shared store is unreachable (decisions are then marked
// Decision::degraded).
enum class FailurePolicy {
  local,   // keep enforcing with this process's own counts (the default)
  open,    // allow every request
  closed,  // reject every request (for login-like endpoints)
};

// A limit: at most `max` units in any sliding `interval`, tracked in subintervals of
// `resolution` (interval / resolution = N subintervals; more subintervals follow the
// sliding window more closely and cost 4 bytes each per limiter).
//
// Every Limit object is valid: the constructors check the invariants and throw
// std::invalid_argument naming the problem, so no bad limit reaches the engine.
// Limits are small values, cheap to copy, and safe to share between threads.
class Limit {
 public:
  // Largest `max` (and so the largest count a subinterval can hold).
  static constexpr std::uint64_t kMaxCount = 0xffffffffULL;
  // Largest number of subintervals, interval / resolution.
  static constexpr std::uint32_t kMaxSubintervals = 65535;
  // Longest interval accepted.
  static constexpr std::chrono::milliseconds kMaxInterval = std::chrono::hours(24 * 366);
  // Longest resolution accepted (2^32 - 1 ms, about 49.7 days).
  static constexpr std::chrono::milliseconds kMaxResolution =
      std::chrono::milliseconds(0xffffffffLL);

  // Throws std::invalid_argument when max is 0 or above kMaxCount, interval or
  // resolution is not positive, resolution does not divide interval, interval exceeds
  // kMaxInterval, resolution exceeds kMaxResolution, or interval / resolution exceeds
  // kMaxSubintervals.
  Limit(std::uint64_t max, std::chrono::milliseconds interval,
        std::chrono::milliseconds resolution);

  // Resolution chosen for you: interval / 10 when that is a whole number of
  // milliseconds, otherwise interval / d for the largest d < 10 that divides it.
  Limit(std::uint64_t max, std::chrono::milliseconds interval);

  std::uint64_t max() const noexcept { return max_; }
  std::chrono::milliseconds interval() const noexcept {
    return std::chrono::milliseconds(resolution_ms_ * subintervals_);
  }
  std::chrono::milliseconds resolution() const noexcept {
    return std::chrono::milliseconds(resolution_ms_);
  }
  std::uint32_t subintervals() const noexcept { return subintervals_; }
  std::int64_t resolution_ns() const noexcept { return resolution_ms_ * 1'000'000; }

  FailurePolicy failure_policy() const noexcept { return failure_policy_; }

  // The same window with another max. Limits that share interval and resolution share
  // counts on a resource (an override that raises max keeps what was already counted).
  Limit with_max(std::uint64_t max) const {
    return Limit(max, interval(), resolution()).with_failure_policy(failure_policy_);
  }
  // The same limit with another failure policy.
  Limit with_failure_policy(FailurePolicy policy) const noexcept {
    Limit copy = *this;
    copy.failure_policy_ = policy;
    return copy;
  }

  // "100/60s@5s" style text, for logs and error messages.
  std::string to_string() const;

  friend bool operator==(const Limit&, const Limit&) = default;

 private:
  std::uint64_t max_;
  std::int64_t resolution_ms_;
  std::uint32_t subintervals_;
  FailurePolicy failure_policy_ = FailurePolicy::local;
};

}  // namespace v1
}  // namespace ratewin
