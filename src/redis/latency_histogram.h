// Latency quantiles without a lock.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>

namespace ratewin {
inline namespace v1 {
namespace detail {

// Log-linear buckets (8 per power of two, so within 12.5%) over nanoseconds, counted
// with relaxed atomic additions: cheap next to the network round trip it measures.
class LatencyHistogram {
 public:
  void record(std::chrono::nanoseconds d) noexcept {
    const auto ns = static_cast<std::uint64_t>(d.count() < 0 ? 0 : d.count());
    buckets_[index(ns)].fetch_add(1, std::memory_order_relaxed);
    std::uint64_t seen = max_.load(std::memory_order_relaxed);
    while (ns > seen && !max_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
    }
  }
  // The upper bound of the bucket holding quantile q (0 < q <= 1); 0 if empty.
  std::chrono::nanoseconds quantile(double q) const noexcept {
    std::uint64_t total = 0;
    for (const auto& b : buckets_) total += b.load(std::memory_order_relaxed);
    if (total == 0) return std::chrono::nanoseconds(0);
    const auto rank = static_cast<std::uint64_t>(std::llround(q * static_cast<double>(total)));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += buckets_[i].load(std::memory_order_relaxed);
      if (seen >= rank && seen > 0) return std::chrono::nanoseconds(upper(i));
    }
    return max();
  }
  std::chrono::nanoseconds max() const noexcept {
    return std::chrono::nanoseconds(max_.load(std::memory_order_relaxed));
  }

 private:
  static constexpr std::size_t kSub = 8;
  static constexpr std::size_t kBuckets = 64 * kSub;
  static std::size_t index(std::uint64_t ns) noexcept {
    if (ns < kSub) return static_cast<std::size_t>(ns);
    const auto top = static_cast<std::size_t>(std::bit_width(ns) - 1);  // >= 3
    const auto sub = static_cast<std::size_t>((ns >> (top - 3)) & (kSub - 1));
    return (top - 2) * kSub + sub;
  }
  static std::int64_t upper(std::size_t i) noexcept {
    if (i < kSub) return static_cast<std::int64_t>(i);
    const std::size_t top = i / kSub + 2;
    const std::size_t sub = i % kSub;
    return static_cast<std::int64_t>(((kSub + sub + 1) << (top - 3)) - 1);
  }

  std::array<std::atomic<std::uint64_t>, kBuckets> buckets_{};
  std::atomic<std::uint64_t> max_{0};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
