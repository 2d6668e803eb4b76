// An exact model of the sliding-window approximation, computed from the raw list of
// admitted requests each time it is asked: slow, obvious, and independent of the
// circular buffer it checks.
#pragma once

#include <cstdint>
#include <vector>

#include "core/int128.h"

namespace ratewin::test {

using detail::u128;

struct Admitted {
  std::int64_t t;
  std::uint64_t cost;
};

inline std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b < 0) ? q - 1 : q;
}

class ReferenceWindow {
 public:
  ReferenceWindow(std::uint32_t n, std::int64_t resolution_ns) : n_(n), r_(resolution_ns) {}

  // Sum of the costs admitted in `epoch`.
  std::uint64_t epoch_count(std::int64_t epoch) const {
    std::uint64_t total = 0;
    for (const auto& a : admitted_) {
      if (floor_div(a.t, r_) == epoch) total += a.cost;
    }
    return total;
  }

  // E(t) * R = sum of epochs e-N+1..e times R + count of epoch e-N times ((e+1)R - t).
  u128 scaled_estimate(std::int64_t t) const {
    const std::int64_t e = floor_div(t, r_);
    u128 scaled = 0;
    for (std::int64_t j = e - n_ + 1; j <= e; ++j) scaled += u128{epoch_count(j)} * u128(r_);
    scaled += u128{epoch_count(e - n_)} * u128((e + 1) * r_ - t);
    return scaled;
  }

  bool allows(std::int64_t t, std::uint64_t max, std::uint64_t cost) const {
    return cost <= max && scaled_estimate(t) + u128{cost} * u128(r_) <= u128{max} * u128(r_);
  }

  std::uint64_t remaining(std::int64_t t, std::uint64_t max) const {
    const u128 scaled = scaled_estimate(t);
    const u128 cap = u128{max} * u128(r_);
    return scaled >= cap ? 0 : static_cast<std::uint64_t>((cap - scaled) / u128(r_));
  }

  // When the newest non-zero epoch j stops counting: (j + N + 1) * R; t if none.
  std::int64_t reset_at(std::int64_t t) const {
    const std::int64_t e = floor_div(t, r_);
    for (std::int64_t j = e; j >= e - n_; --j) {
      if (epoch_count(j) != 0) return (j + n_ + 1) * r_;
    }
    return t;
  }

  void admit(std::int64_t t, std::uint64_t cost) { admitted_.push_back({t, cost}); }
  const std::vector<Admitted>& admitted() const { return admitted_; }
  std::uint32_t n() const { return static_cast<std::uint32_t>(n_); }
  std::int64_t resolution() const { return r_; }

 private:
  std::int64_t n_;
  std::int64_t r_;
  std::vector<Admitted> admitted_;
};

}  // namespace ratewin::test
