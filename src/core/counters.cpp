#include "core/counters.h"

#include <bitset>
#include <mutex>

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

constexpr std::size_t kShared = DecisionCounters::kSlots - 1;

// Hands each thread a slot of its own in [0, kShared) while it lives; threads beyond
// that get the shared slot. Never destroyed, so threads that exit during static
// destruction can still give their slot back.
class SlotRegistry {
 public:
  static SlotRegistry& instance() {
    static auto* registry = new SlotRegistry;
    return *registry;
  }
  std::size_t acquire() {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < kShared; ++i) {
      if (!used_[i]) {
        used_[i] = true;
        return i;
      }
    }
    return kShared;
  }
  void release(std::size_t slot) {
    if (slot == kShared) return;
    std::lock_guard lock(mutex_);
    used_[slot] = false;
  }

 private:
  std::mutex mutex_;
  std::bitset<kShared> used_;
};

}  // namespace

constinit thread_local std::size_t DecisionCounters::thread_slot_plus_one = 0;

DecisionCounters::SlotRelease::~SlotRelease() {
  thread_slot_plus_one = kShared + 1;
  SlotRegistry::instance().release(index);
}

std::size_t DecisionCounters::assign_thread_slot() {
  thread_local SlotRelease release{SlotRegistry::instance().acquire()};
  thread_slot_plus_one = release.index + 1;
  return release.index;
}

std::uint64_t DecisionCounters::total(Kind kind) const noexcept {
  std::uint64_t sum = 0;
  for (const Line& line : lines_) sum += line.counts[kind].load(std::memory_order_relaxed);
  return sum;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
