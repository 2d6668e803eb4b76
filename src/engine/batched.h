// Batched write mode (Options::write_mode = WriteMode::batched): what an engine in that
// mode keeps beside the decisions of sync mode (docs/design/batched-mode.md).
#pragma once

#include <array>
#include <cstdint>

#include "core/record.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class Batcher {
 public:
  // The words a batched engine's records carry after their buckets: the store mark, then
  // the units this engine may still admit before its next flush's merge renews them
  // (kNoBudget: none granted yet, the next admission is written as in sync mode, and its
  // reply grants one), and where the limiter's pending counts are in its shard's list
  // (Shard::pending): index + 1 (0: nowhere), in the list of which round. Written under
  // the lock in a write section, read by lock-free readers too. With `n` the subintervals
  // of the record's key, as lock-free readers must not trust the stored geometry.
  static constexpr std::uint32_t kNoBudget = 0xffffffffU;
  static constexpr std::uint32_t kWords = kMarkWords + 3;
  static constexpr std::array<std::uint32_t, kMaxWords> kInitial{0, kNoBudget, 0, 0};
  static_assert(kWords <= kMaxWords);
  static Bucket& budget(Record& record, std::uint32_t n) noexcept {
    return record.word(n, kMarkWords);
  }
  static Bucket& pending_index(Record& record, std::uint32_t n) noexcept {
    return record.word(n, kMarkWords + 1);
  }
  static Bucket& pending_round(Record& record, std::uint32_t n) noexcept {
    return record.word(n, kMarkWords + 2);
  }
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
