// Fields that lock-free readers may read while a writer holding the lock changes them.
#pragma once

#include <atomic>

namespace ratewin {
inline namespace v1 {
namespace detail {

// A value guarded by a shard's seqlock (see Shard): written only by the lock holder,
// read by anyone. Stores are release and loads acquire (std::atomic_ref), so a reader
// that sees a value stored inside a write section also sees the odd version that
// opened the section when it checks the version again: the seqlock needs no
// standalone fences, which ThreadSanitizer cannot model. On x86-64 both are plain
// moves. Read-modify-write operators are a load then a store, not atomic: writers are
// serialised by the lock.
template <class T>
class SeqlockField {
 public:
  SeqlockField() = default;
  constexpr SeqlockField(T value) noexcept
      : value_(value) {}  // NOLINT(google-explicit-constructor)
  // Copies go through load() and store() too: a defaulted copy would be a plain access.
  SeqlockField(const SeqlockField& other) noexcept : value_(other.load()) {}
  SeqlockField& operator=(const SeqlockField& other) noexcept {
    store(other.load());
    return *this;
  }

  T load() const noexcept {
    return std::atomic_ref<T>(const_cast<T&>(value_)).load(std::memory_order_acquire);
  }
  void store(T value) noexcept {
    std::atomic_ref<T>(value_).store(value, std::memory_order_release);
  }

  operator T() const noexcept { return load(); }  // NOLINT(google-explicit-constructor)
  SeqlockField& operator=(T value) noexcept {
    store(value);
    return *this;
  }
  SeqlockField& operator+=(T value) noexcept {
    store(static_cast<T>(load() + value));
    return *this;
  }
  SeqlockField& operator-=(T value) noexcept {
    store(static_cast<T>(load() - value));
    return *this;
  }

 private:
  alignas(std::atomic_ref<T>::required_alignment) T value_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
