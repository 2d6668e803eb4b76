#include "redis/circuit.h"

#include "redis/steady_ns.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
void CircuitBreaker::start(const Status& failure, const std::string& why) {
  if (failure.ok() || !available_.exchange(false, std::memory_order_acq_rel)) return;
  const bool credentials_refused = failure.code() == Status::Code::auth;
  open_count_.fetch_add(1, std::memory_order_acq_rel);
  opens_.fetch_add(1, std::memory_order_relaxed);
  down_since_ns_.store(steady_ns(), std::memory_order_relaxed);
  if (credentials_refused) {
    // Not an outage that will pass: the configuration is wrong. Said once, as an error.
    reporter_.log(LogLevel::error, why + "; deciding with local counts until it is fixed");
    return;
  }
  reporter_.log(LogLevel::warning, "Redis at " + where_ + " is not reachable yet (" +
                                       why + "); deciding with local counts until it is");
}

bool CircuitBreaker::open(const std::string& why) {
  if (!available_.exchange(false, std::memory_order_acq_rel)) return false;
  open_count_.fetch_add(1, std::memory_order_acq_rel);
  opens_.fetch_add(1, std::memory_order_relaxed);
  down_since_ns_.store(steady_ns(), std::memory_order_relaxed);
  reporter_.log(LogLevel::warning, "Redis at " + where_ + " unreachable (" + why +
                                       "); deciding with local counts until it is back");
  if (opened_) opened_();
  return true;
}

bool CircuitBreaker::close() {
  if (available_.exchange(true, std::memory_order_acq_rel)) return false;
  open_count_.fetch_sub(1, std::memory_order_acq_rel);
  const std::int64_t now = steady_ns();
  back_since_ns_.store(now, std::memory_order_relaxed);
  const std::int64_t down = now - down_since_ns_.load(std::memory_order_relaxed);
  // (At the outage's level: whoever saw it, a setup showing warnings only among them
  // (Python's default), sees its end.)
  reporter_.log(LogLevel::warning, "Redis at " + where_ + " reachable again after " +
                                    std::to_string(down / 1'000'000) +
                                    " ms; re-reading active limiters");
  return true;
}

void CircuitBreaker::retire() {
  if (!available_.exchange(true, std::memory_order_acq_rel)) {
    open_count_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
