#include "redis/circuit.h"

#include "redis/steady_ns.h"

namespace ratewin::inline v1::detail {
void CircuitBreaker::start(bool reachable, const std::string& why) {
  if (reachable) {
    available_.store(true, std::memory_order_release);
    return;
  }
  opens_.fetch_add(1, std::memory_order_relaxed);
  down_since_ns_.store(steady_ns(), std::memory_order_relaxed);
  reporter_.log(LogLevel::warning, "Redis at " + reporter_.where() + " is not reachable yet (" +
                                       why + "); deciding with local counts until it is");
}

bool CircuitBreaker::open(const std::string& why) {
  if (!available_.exchange(false, std::memory_order_acq_rel)) return false;
  opens_.fetch_add(1, std::memory_order_relaxed);
  down_since_ns_.store(steady_ns(), std::memory_order_relaxed);
  reporter_.log(LogLevel::warning, "Redis at " + reporter_.where() + " unreachable (" + why +
                                       "); deciding with local counts until it is back");
  if (opened_) opened_();
  return true;
}

bool CircuitBreaker::close() {
  if (available_.exchange(true, std::memory_order_acq_rel)) return false;
  const std::int64_t down = steady_ns() - down_since_ns_.load(std::memory_order_relaxed);
  reporter_.log(LogLevel::info, "Redis at " + reporter_.where() + " reachable again after " +
                                    std::to_string(down / 1'000'000) +
                                    " ms; re-reading active limiters");
  return true;
}

}  // namespace ratewin::inline v1::detail
