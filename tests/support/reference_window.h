// An exact model of the sliding-window approximation, computed from the raw list of
// admitted requests each time it is asked: slow, obvious, and independent of the
// circular buffer it checks.
#pragma once

#include <cstdint>
#include <vector>

#include "core/int128.h"
#include "core/window.h"

namespace ratewin::test {

using detail::Trailing;
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
  ReferenceWindow(std::uint32_t n, std::int64_t resolution_ns,
                  Trailing trailing = Trailing::interpolated)
      : n_(n), r_(resolution_ns), trailing_(trailing) {}

  // Sum of the costs admitted in `epoch`.
  std::uint64_t epoch_count(std::int64_t epoch) const {
    std::uint64_t total = 0;
    for (const auto& a : admitted_) {
      if (floor_div(a.t, r_) == epoch) total += a.cost;
    }
    return total;
  }

  // E(t) * R = sum of epochs e-N+1..e times R + count of epoch e-N times its weight:
  // (e+1)R - t (interpolated), R (whole) or 0 (none); interpolated, never less than that
  // count less max / 4, times R.
  u128 scaled_estimate(std::int64_t t, std::uint64_t max) const {
    const std::int64_t e = floor_div(t, r_);
    u128 scaled = 0;
    for (std::int64_t j = e - n_ + 1; j <= e; ++j) scaled += u128{epoch_count(j)} * u128(r_);
    const std::int64_t weight = trailing_ == Trailing::interpolated ? (e + 1) * r_ - t
                                : trailing_ == Trailing::whole      ? r_
                                                                    : 0;
    const std::uint64_t trailing = epoch_count(e - n_);
    u128 part = u128{trailing} * u128(weight);
    if (trailing_ == Trailing::interpolated && trailing > max / 4 &&
        u128{trailing - max / 4} * u128(r_) > part)
      part = u128{trailing - max / 4} * u128(r_);
    return scaled + part;
  }

  bool allows(std::int64_t t, std::uint64_t max, std::uint64_t cost) const {
    return cost <= max && scaled_estimate(t, max) + u128{cost} * u128(r_) <= u128{max} * u128(r_);
  }

  std::uint64_t remaining(std::int64_t t, std::uint64_t max) const {
    const u128 scaled = scaled_estimate(t, max);
    const u128 cap = u128{max} * u128(r_);
    return scaled >= cap ? 0 : static_cast<std::uint64_t>((cap - scaled) / u128(r_));
  }

  // When the newest non-zero epoch j stops counting: (j + N + 1) * R, or (j + N) * R when
  // trailing counts do not count; t if none.
  std::int64_t reset_at(std::int64_t t) const {
    const std::int64_t e = floor_div(t, r_);
    const std::int64_t lasts = trailing_ == Trailing::none ? n_ : n_ + 1;
    for (std::int64_t j = e; j > e - lasts; --j) {
      if (epoch_count(j) != 0) return (j + lasts) * r_;
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
  Trailing trailing_;
  std::vector<Admitted> admitted_;
};

}  // namespace ratewin::test
