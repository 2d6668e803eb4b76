// A value replaced now and then (the rules, the overrides) and read on every request:
// readers keep their own copy of the pointer and take the lock only when a new value
// has been published since they last looked.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace ratewin::server {

template <class T>
class Published {
 public:
  explicit Published(std::shared_ptr<const T> value) : value_(std::move(value)) {}

  void publish(std::shared_ptr<const T> value) {
    {
      std::lock_guard lock(mutex_);
      value_ = std::move(value);
    }
    generation_.fetch_add(1, std::memory_order_release);
  }
  std::shared_ptr<const T> get() const {
    std::lock_guard lock(mutex_);
    return value_;
  }

  // One thread's view: current as of its last get(), refreshed at no cost when nothing
  // was published.
  class View {
   public:
    explicit View(const Published& source) : source_(&source) {}
    const T& get() {
      const std::uint64_t g = source_->generation_.load(std::memory_order_acquire);
      if (g != generation_ || value_ == nullptr) {
        value_ = source_->get();
        generation_ = g;
      }
      return *value_;
    }
    // What get() returned last, held (never a newer value: what was read from it stays
    // valid while this is held).
    std::shared_ptr<const T> shared() const { return value_; }
    // Changes whenever get() returns another value (never back to an earlier one), so
    // it can key what is derived from the value.
    std::uint64_t generation() const noexcept { return generation_; }

   private:
    const Published* source_;
    std::uint64_t generation_ = 0;
    std::shared_ptr<const T> value_;
  };

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const T> value_;
  std::atomic<std::uint64_t> generation_{0};
};

}  // namespace ratewin::server
