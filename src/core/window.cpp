#include "core/window.h"

#include <algorithm>
#include <limits>

namespace ratewin {
inline namespace v1 {
namespace detail {

void SlidingWindow::reset(std::int64_t t) noexcept {
  state_.epoch = epoch_of(t, resolution_);
  state_.sum = 0;
  state_.trailing = 0;
  state_.head = 0;
  state_.newest = 0;
  std::fill_n(buckets_, n_, 0U);
}

void SlidingWindow::slide(std::int64_t t) noexcept {
  const std::int64_t epoch = epoch_of(t, resolution_);
  const std::int64_t steps = epoch - state_.epoch;
  if (steps <= 0) return;
  if (steps > static_cast<std::int64_t>(n_)) {
    // Everything, the trailing subinterval included, has left the window.
    std::fill_n(buckets_, n_, 0U);
    state_.sum = 0;
    state_.trailing = 0;
  } else {
    // Each step frees the oldest slot for the next epoch; the last count to leave the
    // buckets is the one of epoch (new epoch - N), the new trailing count.
    std::uint32_t slot = state_.head;
    std::uint32_t leaving = 0;
    for (std::int64_t i = 0; i < steps; ++i) {
      slot = slot_after(slot);
      leaving = buckets_[slot];
      state_.sum -= leaving;
      buckets_[slot] = 0;
    }
    state_.trailing = leaving;
    state_.head = static_cast<std::uint16_t>(slot);
  }
  state_.epoch = epoch;
}

u128 SlidingWindow::scaled_estimate(std::int64_t t, std::uint64_t max) noexcept {
  advance(t);
  const std::int64_t start = state_.epoch * resolution_;
  const auto weight = static_cast<std::uint64_t>(start + resolution_ - std::max(t, start));
  const auto r = static_cast<std::uint64_t>(resolution_);
  const std::uint32_t trailing = state_.trailing;
  return static_cast<u128>(state_.sum) * r +
         weighed_trailing(trailing, weight, r, least_trailing(trailing, max));
}

std::uint32_t SlidingWindow::in_order(std::uint32_t k) const noexcept {
  if (k == 0) return state_.trailing;
  // Epoch e-N+k sits k slots after the head (the head holds epoch e = e-N+N).
  return buckets_[(state_.head + k) % n_];
}

bool SlidingWindow::merge(std::int64_t epoch, std::uint64_t count) noexcept {
  if (epoch > state_.epoch) advance(epoch * resolution_);
  const std::int64_t age = state_.epoch - epoch;
  if (age > static_cast<std::int64_t>(n_)) return false;
  const auto shared = static_cast<std::uint32_t>(std::min<std::uint64_t>(count, 0xffffffffU));
  if (age == static_cast<std::int64_t>(n_)) {
    if (shared <= state_.trailing) return false;
    state_.trailing = shared;
    return true;
  }
  const std::uint32_t slot = (state_.head + n_ - static_cast<std::uint32_t>(age)) % n_;
  Bucket& bucket = buckets_[slot];
  if (shared <= bucket) return false;
  if (state_.sum == 0 || static_cast<std::uint32_t>(age) < age_of(state_.newest, state_.head)) {
    state_.newest = static_cast<std::uint16_t>(slot);
  }
  state_.sum += shared - bucket;
  bucket = shared;
  return true;
}

void SlidingWindow::remove(std::int64_t epoch, std::uint64_t cost) noexcept {
  const std::int64_t age = state_.epoch - epoch;
  if (age < 0 || age >= static_cast<std::int64_t>(n_)) return;
  const std::uint32_t slot = (state_.head + n_ - static_cast<std::uint32_t>(age)) % n_;
  const std::uint32_t taken =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(buckets_[slot], cost));
  buckets_[slot] -= taken;
  state_.sum -= taken;
  if (state_.sum != 0 && slot == state_.newest && buckets_[slot] == 0) {
    // The newest count is gone: the next non-empty bucket, older, becomes the newest.
    std::uint32_t s = slot;
    while (buckets_[s] == 0) s = slot_before(s);
    state_.newest = static_cast<std::uint16_t>(s);
  }
}

bool SlidingWindow::empty_at(std::int64_t t) const noexcept {
  const std::int64_t steps = epoch_of(t, resolution_) - state_.epoch;
  if (steps > static_cast<std::int64_t>(n_)) return true;
  if (steps <= 0) return state_.sum == 0 && state_.trailing == 0;
  if (state_.sum == 0) return true;
  // After `steps` epochs the counts still held are those from position `steps` on.
  for (auto k = static_cast<std::uint32_t>(steps); k <= n_; ++k) {
    if (in_order(k) != 0) return false;
  }
  return true;
}

std::int64_t SlidingWindow::empty_from() const noexcept {
  if (state_.sum == 0) {
    if (state_.trailing == 0) return std::numeric_limits<std::int64_t>::min();
    return (state_.epoch + 1) * resolution_;  // the trailing count leaves next
  }
  // The newest count, of epoch e - age, is held until epoch e - age + N ends.
  const std::int64_t newest = state_.epoch - age_of(state_.newest, state_.head);
  return (newest + n_ + 1) * resolution_;
}

std::uint32_t SlidingWindow::count_for_epoch(std::int64_t epoch) const noexcept {
  const std::int64_t age = state_.epoch - epoch;
  if (age < 0 || age > static_cast<std::int64_t>(n_)) return 0;
  return in_order(n_ - static_cast<std::uint32_t>(age));
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
