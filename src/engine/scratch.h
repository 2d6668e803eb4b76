// Scratch space for a few values on the stack, many on the heap.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace ratewin {
inline namespace v1 {
namespace detail {

// `n` values: on the stack when at most N (the common case), else on the heap.
template <class T, std::size_t N>
class Scratch {
 public:
  explicit Scratch(std::size_t n)
      : large_(n > N ? n : 0),
        values_(n > N ? std::span<T>(large_) : std::span<T>(small_.data(), n)) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::span<T> span() noexcept { return values_; }

 private:
  std::array<T, N> small_{};
  std::vector<T> large_;
  std::span<T> values_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
