// One Engine::try_acquire_all call, in the parts that come before and after its shared
// writes, so that the writes can be made synchronously (EngineCore::try_acquire_all) or
// from an event loop (AsyncAcquirer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "engine/admission.h"
#include "engine/engine_core.h"
#include "engine/scratch.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// All or nothing (see Engine::try_acquire_all). begin() decides every limit locally; if
// shared writes are due, they are writes(), to be made with the store (add_all) into
// counts() and written(), after which finish() confirms each from its shared window and
// gives back what a refusal leaves counted. In a refused call, the limits that were not
// decided are described (EngineCore::describe), never left empty. `items` and `out` must
// outlive the object, which must not move (its admissions refer to its members).
class AcquireAll {
 public:
  AcquireAll(EngineCore& engine, std::span<const Acquisition> items, std::span<Decision> out);
  AcquireAll(const AcquireAll&) = delete;
  AcquireAll& operator=(const AcquireAll&) = delete;

  // The index of the limit that refused, or items.size() when all admitted; nullopt when
  // shared writes are due first.
  std::optional<std::size_t> begin();
  std::span<const StoreWrite> writes() noexcept { return batch_; }
  std::span<const std::span<std::uint64_t>> counts() noexcept { return counts_; }
  std::span<bool> written() noexcept { return written_; }
  // After the writes. Give-backs go through `async` when given (without waiting),
  // otherwise through the store.
  std::size_t finish(AsyncWriter* async = nullptr);

 private:
  struct Item {
    LimiterKey key;
    std::uint64_t hash = 0;
    EngineCore::Counted counted;
    bool degraded = false;  // the store was unreachable for it when the call began
    bool refused = false;   // refused on this engine's counts before anything was counted
  };
  void give_back_all_but(std::size_t refusing, AsyncWriter* async);
  // Fills the decisions of the items from `first` on that refused nothing with
  // EngineCore::describe at `now` (the call's time): the call was refused, and they were
  // not decided.
  void describe_from(std::size_t first, std::int64_t now);

  EngineCore& engine_;
  std::span<const Acquisition> items_;
  std::span<Decision> out_;
  Scratch<Item, 8> state_scratch_;
  Scratch<std::optional<Admission>, 8> pending_scratch_;
  std::span<Item> state_;
  std::span<std::optional<Admission>> pending_;
  std::size_t writes_ = 0;
  std::size_t window_counts_ = 0;
  // The writes' buffers, made once they are known.
  std::optional<Scratch<StoreWrite, 8>> batch_scratch_;
  std::optional<Scratch<std::span<std::uint64_t>, 8>> counts_scratch_;
  std::optional<Scratch<std::uint64_t, 64>> window_scratch_;
  std::array<bool, 8> written_small_{};
  std::unique_ptr<bool[]> written_large_;
  std::span<StoreWrite> batch_;
  std::span<std::span<std::uint64_t>> counts_;
  std::span<bool> written_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
