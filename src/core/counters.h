// Decision counters that threads can bump without sharing a cache line.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ratewin {
inline namespace v1 {
namespace detail {

// Counts per kind, spread over per-thread cache lines: a thread adds to a line no other
// live thread writes (a plain load and store, no locked instruction), so deciding on
// different cores never bounces a counter between them. Threads beyond the first
// kSlots - 1 alive at once share the last line with atomic additions. Totals are read
// by summing the lines; they are exact once the adding threads are done.
class DecisionCounters {
 public:
  enum Kind : std::size_t { kAllowed, kRejected, kDegraded, kWouldReject, kKinds };
  static constexpr std::size_t kSlots = 128;

  void add(Kind kind) noexcept {
    const std::size_t plus_one = thread_slot_plus_one;
    const std::size_t slot = plus_one != 0 ? plus_one - 1 : assign_thread_slot();
    std::atomic<std::uint64_t>& c = lines_[slot].counts[kind];
    if (slot == kSlots - 1) {
      c.fetch_add(1, std::memory_order_relaxed);  // the line shared by overflow threads
    } else {
      // This thread is the only writer of its line: no locked instruction needed.
      c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  std::uint64_t total(Kind kind) const noexcept;

 private:
  // This thread's slot + 1, or 0 before it first counts (constinit: read without a TLS
  // init wrapper).
  static constinit thread_local std::size_t thread_slot_plus_one;
  static std::size_t assign_thread_slot();
  // Gives a thread's slot back when the thread exits; counts it may still make (from
  // other thread_local destructors) then go to the shared line.
  struct SlotRelease {
    std::size_t index;
    ~SlotRelease();
  };

  struct alignas(64) Line {
    std::atomic<std::uint64_t> counts[kKinds] = {};
  };
  std::array<Line, kSlots> lines_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
