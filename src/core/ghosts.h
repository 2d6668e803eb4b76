// What the registry remembers of limiters it evicted while they still counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ratewin {
inline namespace v1 {
namespace detail {

// The counts of a limiter evicted while its window still held some (a flood of new keys
// filled the registry with live limiters), kept so that its key, back, is decided on
// them rather than on a fresh quota. For a ring, `when` is the newest epoch its window had
// moved to and `weight` the counts its window held then (they come back lumped in that
// epoch: they leave the window no sooner than they would have). For a token bucket,
// `when` and `weight` are its TAT.
struct Ghost {
  std::uint64_t resource = 0;
  std::int64_t when = 0;
  std::uint64_t weight = 0;  // 0: a free slot
};

// A set-associative table of ghosts of one window geometry: a key's ghost can only be
// in the 4 slots of its set, found by the whole resource (no false match: a key never
// inherits another's counts). A full set keeps its heaviest ghosts: a new ghost replaces
// an expired one, or else the lightest if it weighs at least as much (the oldest among
// equals), or else it is dropped. So the ghosts of a flood's one-request keys give way
// to a spent quota's, and forgetting a key's count takes ghosts at least as heavy.
class GhostTable {
 public:
  static constexpr std::size_t kWays = 4;

  // At least `slots` slots (a power of two, in sets of kWays).
  explicit GhostTable(std::size_t slots) {
    std::size_t sets = 1;
    while (sets * kWays < slots) sets *= 2;
    slots_.resize(sets * kWays);
    set_mask_ = sets - 1;
  }

  std::size_t slots() const noexcept { return slots_.size(); }
  std::size_t bytes() const noexcept { return slots_.capacity() * sizeof(Ghost); }

  // A table of at least `slots` slots holding this one's ghosts (as its sets allow).
  // `hash_of(resource)` is the hash a ghost's limiter key has.
  template <class HashOf, class Expired>
  GhostTable grown(std::size_t slots, HashOf&& hash_of, Expired&& expired) const {
    GhostTable out(slots);
    for (const Ghost& g : slots_)
      if (g.weight != 0 && !expired(g)) out.put(g, hash_of(g.resource), expired);
    return out;
  }

  // Keeps `ghost` (whose limiter's key hashes to `hash`), as its set allows. `expired(g)`
  // says whether a slot's ghost no longer counts. False when a ghost that still counted
  // was lost for it (replaced, or this one dropped): the table is too small.
  template <class Expired>
  bool put(const Ghost& ghost, std::uint64_t hash, Expired&& expired) noexcept {
    Ghost* set = set_of(hash);
    Ghost* target = nullptr;
    for (std::size_t i = 0; i < kWays; ++i) {
      Ghost& g = set[i];
      if (g.weight == 0 || g.resource == ghost.resource || expired(g)) {
        target = &g;
        break;
      }
      if (target == nullptr || g.weight < target->weight ||
          (g.weight == target->weight && g.when < target->when))
        target = &g;
    }
    const bool lost =
        target->weight != 0 && target->resource != ghost.resource && !expired(*target);
    if (lost && ghost.weight < target->weight) return false;  // lighter than its whole set
    *target = ghost;
    return !lost;
  }

  // The ghost of `resource`, taken out of the table; weight 0 if there is none.
  Ghost take(std::uint64_t resource, std::uint64_t hash) noexcept {
    Ghost* set = set_of(hash);
    for (std::size_t i = 0; i < kWays; ++i) {
      if (set[i].weight != 0 && set[i].resource == resource) {
        const Ghost found = set[i];
        set[i] = Ghost{};
        return found;
      }
    }
    return {};
  }

 private:
  // (The registry takes the shard from the hash's low bits and the table's home slot
  // from its highest: the set comes from the bits between.)
  Ghost* set_of(std::uint64_t hash) noexcept {
    return &slots_[((hash >> 24) & set_mask_) * kWays];
  }

  std::vector<Ghost> slots_;
  std::size_t set_mask_ = 0;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
