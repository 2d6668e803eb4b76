#include "core/registry.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <limits>
#include <new>
#include <stdexcept>

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

std::size_t home(std::uint64_t hash, std::size_t slot_count) noexcept {
  return static_cast<std::size_t>((static_cast<u128>(hash) * slot_count) >> 64);
}

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

// A slot array in a mapping of its own, so that its pages can be released while its
// addresses stay readable. `count` reads 0 once released.
struct RecordTable::Slots {
  alignas(64) SeqlockField<std::size_t> count;

  SeqlockField<std::uint64_t>& at(std::size_t i) noexcept {
    return reinterpret_cast<SeqlockField<std::uint64_t>*>(this + 1)[i];
  }
  std::size_t next(std::size_t i, std::size_t n) noexcept { return i + 1 == n ? 0 : i + 1; }

  static std::size_t bytes_for(std::size_t slots) noexcept {
    const std::size_t raw = sizeof(Slots) + slots * sizeof(std::uint64_t);
    return (raw + page_size() - 1) / page_size() * page_size();
  }
  // A zeroed array of at least `slots` slots (as many as its pages hold).
  static Slots* map(std::size_t slots) {
    const std::size_t bytes = bytes_for(slots);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    auto* s = static_cast<Slots*>(p);
    s->count = (bytes - sizeof(Slots)) / sizeof(std::uint64_t);
    return s;
  }
};

RecordTable::~RecordTable() {
  if (Slots* s = slots_.load(std::memory_order_relaxed)) ::munmap(s, Slots::bytes_for(s->count));
  for (const auto& [s, bytes] : retired_) ::munmap(s, bytes);
}

std::size_t RecordTable::slot_count() const noexcept {
  const Slots* s = slots_.load(std::memory_order_relaxed);
  return s == nullptr ? 0 : s->count.load();
}

RecordId RecordTable::id_at(std::size_t slot) const noexcept {
  return id_of(slots_.load(std::memory_order_relaxed)->at(slot));
}

std::size_t RecordTable::find(const LimiterKey& key, std::uint64_t hash) const noexcept {
  Slots* s = slots_.load(std::memory_order_relaxed);
  if (s == nullptr) return npos;
  const std::size_t n = s->count;
  const std::uint64_t tag = tag_of(hash);
  for (std::size_t i = home(hash, n);; i = s->next(i, n)) {
    const std::uint64_t v = s->at(i);
    if (v == 0) return npos;
    if ((v >> 32) == tag && record(v).matches(key)) return i;
  }
}

void RecordTable::prefetch(std::uint64_t hash) const noexcept {
  Slots* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return;
  const std::size_t n = s->count;
  if (n != 0) __builtin_prefetch(&s->at(home(hash, n)));
}

RecordRef RecordTable::find_racy(const LimiterKey& key, std::uint64_t hash) const noexcept {
  Slots* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return {};
  const std::size_t n = s->count;  // 0 once the array has been retired
  const std::uint64_t tag = tag_of(hash);
  std::size_t i = n == 0 ? 0 : home(hash, n);
  for (std::size_t probes = 0; probes < n; ++probes, i = s->next(i, n)) {
    const std::uint64_t v = s->at(i);
    if (v == 0) return {};
    if ((v >> 32) != tag) continue;
    std::byte* p = pool_.address_racy(id_of(v));
    if (p == nullptr) return {};
    auto* r = reinterpret_cast<Record*>(p);
    if (r->matches(key)) return {id_of(v), r};
  }
  return {};
}

void RecordTable::place(Slots& slots, std::uint64_t encoded, std::uint64_t hash) noexcept {
  const std::size_t n = slots.count;
  std::size_t i = home(hash, n);
  while (slots.at(i) != 0) i = slots.next(i, n);
  slots.at(i) = encoded;
}

void RecordTable::rehash(std::size_t slot_count) {
  Slots* old = slots_.load(std::memory_order_relaxed);
  Slots* fresh = Slots::map(slot_count);
  if (old != nullptr) {
    for (std::size_t i = 0, n = old->count; i < n; ++i) {
      const std::uint64_t v = old->at(i);
      if (v != 0) place(*fresh, v, record(v).key().hash());
    }
  }
  slots_.store(fresh, std::memory_order_release);
  if (old != nullptr) {
    // Readers may still probe the old array: keep its addresses, drop its memory.
    const std::size_t bytes = Slots::bytes_for(old->count);
    retired_.emplace_back(old, bytes);
    ::madvise(old, bytes, MADV_DONTNEED);
  }
}

std::size_t RecordTable::growth(std::size_t max_slots) const noexcept {
  const std::size_t n = slot_count();
  if ((size_ + 1) * 4 <= n * 3) return 0;
  const std::size_t needed = (size_ + 1) * 4 / 3 + 1;
  std::size_t grown = std::max<std::size_t>(8, n * 2);
  // Growth stops at max_slots, unless the shard is over capacity (forced records): then
  // it stays geometric, so inserting stays amortised O(1).
  if (needed <= max_slots) grown = std::min(grown, max_slots);
  return std::max(grown, needed);
}

std::size_t RecordTable::bytes_for(std::size_t slots) noexcept { return Slots::bytes_for(slots); }

std::size_t RecordTable::bytes() const noexcept {
  const std::size_t n = slot_count();
  return n == 0 ? 0 : Slots::bytes_for(n);
}

std::size_t RecordTable::bytes_after_insert(std::size_t max_slots) const noexcept {
  const std::size_t grown = growth(max_slots);
  return grown == 0 ? bytes() : Slots::bytes_for(grown);
}

void RecordTable::insert(RecordId id, std::uint64_t hash, std::size_t max_slots) {
  if (const std::size_t grown = growth(max_slots); grown != 0) rehash(grown);
  place(*slots_.load(std::memory_order_relaxed), (tag_of(hash) << 32) | (std::uint64_t{id} + 1),
        hash);
  ++size_;
}

void RecordTable::erase(std::size_t slot) noexcept {
  // Backward-shift deletion: pull later members of the probe run into the hole unless
  // their home lies cyclically in (hole, j].
  Slots& s = *slots_.load(std::memory_order_relaxed);
  const std::size_t n = s.count;
  std::size_t hole = slot;
  for (std::size_t j = s.next(slot, n);; j = s.next(j, n)) {
    const std::uint64_t v = s.at(j);
    if (v == 0) break;
    const std::size_t h = home(record(v).key().hash(), n);
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    s.at(hole) = v;
    hole = j;
  }
  s.at(hole) = 0;
  --size_;
}

void Shard::WriteSection::open() noexcept {
  if (open_) return;
  open_ = true;
  version_ = shard_.version.load(std::memory_order_relaxed);
  // Data stores that follow are release stores (SeqlockField): a reader that sees one
  // of them sees this odd version too.
  shard_.version.store(version_ + 1, std::memory_order_relaxed);
}

Shard::WriteSection::~WriteSection() {
  if (open_) shard_.version.store(version_ + 2, std::memory_order_release);
}

void Shard::configure(std::size_t records, std::size_t bytes, std::uint32_t words,
                      const std::array<std::uint32_t, kMaxWords>& initial) noexcept {
  words_ = words;
  initial_ = initial;
  // Every record takes at least the smallest record's bytes plus its share of the table
  // (8-byte slots at most 3/4 full): the count bound that the bytes imply.
  const std::size_t least = Record::bytes_for(1, words) + 11;
  capacity_ = std::max<std::size_t>(1, std::min(records, bytes / least));
  max_slots_ = std::max<std::size_t>(8, capacity_ * 4 / 3 + 2);
  budget_ = bytes;
}

std::size_t Shard::capacity_for(std::uint32_t subintervals) const noexcept {
  // n records and a table of slots for them (at most 3/4 full, in whole pages).
  const std::size_t record = Record::bytes_for(subintervals, words_);
  // The table's slots for n records: it doubles from 8, at most 3/4 full, up to
  // max_slots_ (n never exceeds capacity_, which max_slots_ holds).
  const auto fits = [&](std::size_t n) {
    std::size_t slots = 8;
    while (n * 4 > slots * 3) slots = std::min(slots * 2, max_slots_);
    return n * record + RecordTable::bytes_for(slots) <= budget_;
  };
  std::size_t low = 0;                                           // fits
  std::size_t high = std::min(capacity_, budget_ / record) + 1;  // does not
  while (high - low > 1) {
    const std::size_t mid = low + (high - low) / 2;
    (fits(mid) ? low : high) = mid;
  }
  return low;
}

RecordRef Shard::find(const LimiterKey& key, std::uint64_t hash) const noexcept {
  const std::size_t slot = table_.find(key, hash);
  if (slot == RecordTable::npos) return {};
  const RecordId id = table_.id_at(slot);
  return {id, record(id)};
}

RecordRef Shard::find_or_insert(const LimiterKey& key, std::uint64_t hash, std::int64_t now_ns,
                                WriteSection& section, bool cold, bool force) {
  if (RecordRef found = find(key, hash)) {
    // The LRU order is kept per subinterval: a record moves to the newest end the first
    // time it is used in a new one, so a hot record costs no list update per call.
    if (found.record->moved_on(now_ns)) touch(found);
    return found;
  }
  const std::size_t bytes = Record::bytes_for(key.subintervals, words_);
  // Back within the bounds (a shard over them because of forced records shrinks as they
  // go), by evicting limiters whose windows are empty, else the lightest live one (its
  // counts kept as a ghost in local mode).
  while (!has_room(bytes)) {
    section.open();
    if (!evict_one(now_ns) && !evict_live(key, now_ns)) break;
  }
  if (!has_room(bytes) && !force) {
    ++full;
    return {};
  }
  section.open();
  const RecordId id = pool_.allocate(bytes);
  Record* r = record(id);
  r->resource = key.resource;
  r->resolution_ms = key.resolution_ms;
  r->subintervals = static_cast<std::uint16_t>(key.subintervals);
  r->pins = 0;
  r->clear(cold ? 0 : now_ns);
  for (std::uint32_t i = 0; i < words_; ++i) r->word(key.subintervals, i) = initial_[i];
  try {
    lru_of(*r);  // made now, so that linking it cannot throw
    table_.insert(id, hash, max_slots_);
  } catch (...) {
    pool_.deallocate(id, bytes);
    throw;
  }
  record_bytes_ += bytes;
  link_newest({id, r});
  if (!cold) revive(*r, hash, now_ns);
  return {id, r};
}

Shard::Lru* Shard::find_lru(std::uint32_t resolution_ms, std::uint32_t subintervals) noexcept {
  for (Lru& l : lrus_)
    if (l.resolution_ms == resolution_ms && l.subintervals == subintervals) return &l;
  return nullptr;
}

Shard::Lru& Shard::lru_of(const Record& r) {
  if (Lru* found = find_lru(r.resolution_ms, r.subintervals)) return *found;
  Lru& l = lrus_.emplace_back();
  l.resolution_ms = r.resolution_ms;
  l.subintervals = r.subintervals;
  return l;
}

// (lru_of cannot throw below: a record's list exists from its insertion on.)
void Shard::touch(RecordRef ref) noexcept {
  if (ref.record->pins == 0 && ref.id != lru_of(*ref.record).newest) {
    unlink(ref);
    link_newest(ref);
  }
}

void Shard::unlink(RecordRef ref) noexcept {
  Record& r = *ref.record;
  Lru& l = lru_of(r);
  if (r.lru_older != kNoRecord) {
    record(r.lru_older)->lru_newer = r.lru_newer;
  } else {
    l.oldest = r.lru_newer;
  }
  if (r.lru_newer != kNoRecord) {
    record(r.lru_newer)->lru_older = r.lru_older;
  } else {
    l.newest = r.lru_older;
  }
  r.lru_older = r.lru_newer = kNoRecord;
  --l.size;
}

void Shard::link_newest(RecordRef ref) noexcept {
  Record& r = *ref.record;
  Lru& l = lru_of(r);
  r.lru_older = l.newest;
  r.lru_newer = kNoRecord;
  if (l.newest != kNoRecord) {
    record(l.newest)->lru_newer = ref.id;
  } else {
    l.oldest = ref.id;
  }
  l.newest = ref.id;
  ++l.size;
}

void Shard::pin(RecordRef ref) {
  Record& r = *ref.record;
  if (r.pins == 0xffff) throw std::length_error("ratewin: more than 65535 handles on one limiter");
  if (r.pins++ == 0) {
    unlink(ref);
    ++pinned;
  }
}

void Shard::unpin(RecordRef ref) noexcept {
  if (--ref.record->pins == 0) {
    link_newest(ref);
    --pinned;
  }
}

bool Shard::evict_one(std::int64_t now_ns) {
  for (Lru& l : lrus_) {
    if (l.oldest == kNoRecord || (l.oldest == l.searched && now_ns < l.live_until)) continue;
    std::int64_t live_until = std::numeric_limits<std::int64_t>::max();
    RecordId id = l.oldest;
    bool rotated = false;
    for (int i = 0; i < kEmptyScan && id != kNoRecord; ++i) {
      Record* r = record(id);
      const RecordId newer = r->lru_newer;
      const std::int64_t empty_from = r->empty_from();
      if (empty_from <= now_ns) {
        ++evictions;
        drop({id, r});
        return true;
      }
      live_until = std::min(live_until, empty_from);
      if (!r->is_ring()) {
        // A second chance: a bucket or a log that its callers keep busy may never be
        // touched (the lock-free read decides it, and it has no epochs that send a call
        // to the lock), so it would stay among the oldest, live, and keep every record of
        // its geometry from being evicted. Moved to the newest end, it lets the scan see
        // the others.
        touch({id, r});
        rotated = true;
      }
      id = newer;
    }
    l.searched = rotated ? kNoRecord : l.oldest;
    l.live_until = live_until;
  }
  return false;
}

void Shard::drop(RecordRef ref) noexcept {
  Record* r = ref.record;
  unlink(ref);
  const LimiterKey key = r->key();
  table_.erase(table_.find(key, key.hash()));
  // A geometry no key has: a reference to this record kept across an unlocked stretch
  // (an admission's write to the store) no longer matches its key.
  r->subintervals = 0;
  const std::size_t bytes = Record::bytes_for(key.subintervals, words_);
  pool_.deallocate(ref.id, bytes);
  record_bytes_ -= bytes;
}

namespace {

// Whether a ghost of a geometry no longer counts at now_ns: a ring's once its epoch has
// left the window (the trailing one included), a bucket's once it is full again.
bool ghost_expired(const Ghost& g, std::uint32_t resolution_ms, std::uint32_t subintervals,
                   std::int64_t now_ns) noexcept {
  if (resolution_ms == 0) return g.when <= now_ns;
  const std::int64_t r = static_cast<std::int64_t>(resolution_ms) * 1'000'000;
  return g.when < SlidingWindow::epoch_of(now_ns, r) - static_cast<std::int64_t>(subintervals);
}

}  // namespace

bool Shard::evict_live(const LimiterKey& key, std::int64_t now_ns) {
  // The lightest of the oldest: a flood's keys (one request each) go before a client's
  // spent quota. Those heavier than it move to the newest end, so that the oldest end
  // does not fill up with spent quotas (no record there is touched again while its
  // callers are refused) and they are not the next to go.
  struct Seen {
    RecordId id;
    std::uint64_t weight;
    Ghost ghost;
  };
  const auto lightest = [&](Lru& l, Ghost& ghost) -> RecordId {
    std::array<Seen, kLiveScan> seen;
    std::size_t count = 0;
    std::size_t best = 0;
    RecordId id = l.oldest;
    for (int i = 0; i < kLiveScan && id != kNoRecord; ++i) {
      Record* r = record(id);
      Seen s{id, 0, {r->resource, 0, 0}};
      id = r->lru_newer;
      if (r->is_bucket()) {
        // (A bucket's ghost weighs its TAT: the later, the more it holds.)
        s.ghost.when = r->bucket().tat();
        s.ghost.weight = static_cast<std::uint64_t>(std::max<std::int64_t>(1, s.ghost.when));
        s.weight = static_cast<std::uint64_t>(std::max<std::int64_t>(0, s.ghost.when - now_ns));
      } else if (r->is_ring() && r->resource != kOverflowResource) {
        // (What its window holds, 0 once all of it has left by now_ns. An upper bound
        // when some has left: O(1) where the exact figure costs a pass over N buckets
        // per candidate, and a ghost must never hold less than its limiter did.)
        const SlidingWindow w = r->view();
        s.ghost.when = w.epoch();
        if (!ghost_expired(s.ghost, r->resolution_ms, r->subintervals, now_ns))
          s.ghost.weight = w.held();
        s.weight = s.ghost.weight;
      } else {
        continue;  // a log, or an overflow limiter: not evicted while it counts
      }
      if (count == 0 || s.weight < seen[best].weight) best = count;
      seen[count++] = s;
    }
    if (count == 0) return kNoRecord;
    for (std::size_t i = 0; i < count; ++i)
      if (seen[i].weight > seen[best].weight) touch({seen[i].id, record(seen[i].id)});
    ghost = seen[best].ghost;
    return seen[best].id;
  };
  Lru* from = find_lru(key.resolution_ms, key.subintervals);
  Ghost ghost;
  RecordId victim = from != nullptr ? lightest(*from, ghost) : kNoRecord;
  for (std::size_t i = 0; victim == kNoRecord && i < lrus_.size(); ++i) {
    if (&lrus_[i] == from) continue;
    from = &lrus_[i];
    victim = lightest(*from, ghost);
  }
  if (victim == kNoRecord) return false;
  Record* r = record(victim);
  const LimiterKey victim_key = r->key();
  // (One whose counts have all left its window by now was empty after all.)
  const bool counts = ghost.weight != 0 && !ghost_expired(ghost, victim_key.resolution_ms,
                                                          victim_key.subintervals, now_ns);
  if (counts && words_ == 0) {
    const auto expired = [&](const Ghost& g) {
      return ghost_expired(g, victim_key.resolution_ms, victim_key.subintervals, now_ns);
    };
    std::unique_ptr<GhostTable>& ghosts = from->ghosts;
    if (ghosts == nullptr) {
      ghosts = std::make_unique<GhostTable>(kFirstGhosts);
      ghost_bytes_ += ghosts->bytes();
    }
    if (!ghosts->put(ghost, victim_key.hash(), expired) && ghosts->slots() < from->size / 2) {
      auto made = std::make_unique<GhostTable>(ghosts->grown(
          ghosts->slots() * 2,
          [&](std::uint64_t resource) {
            return LimiterKey{resource, victim_key.resolution_ms, victim_key.subintervals}
                .hash();
          },
          expired));
      ghost_bytes_ += made->bytes() - ghosts->bytes();
      ghosts = std::move(made);
    }
  }
  ++(counts ? evictions_active : evictions);
  drop({victim, r});
  return true;
}

void Shard::revive(Record& r, std::uint64_t hash, std::int64_t now_ns) noexcept {
  Lru* l = find_lru(r.resolution_ms, r.subintervals);
  if (l == nullptr || l->ghosts == nullptr) return;
  const Ghost g = l->ghosts->take(r.resource, hash);
  if (g.weight == 0 || ghost_expired(g, r.resolution_ms, r.subintervals, now_ns)) return;
  if (r.is_bucket()) {
    r.bucket().assign(g.when);
  } else {
    r.view().merge(g.when, g.weight);
  }
}

Registry::Registry(std::size_t max_limiters, std::size_t max_bytes, std::uint32_t words,
                   const std::array<std::uint32_t, kMaxWords>& initial)
    : max_limiters_(max_limiters), max_bytes_(max_bytes), words_(words) {
  if (max_limiters == 0) throw std::invalid_argument("ratewin: max_limiters must be at least 1");
  if (max_bytes < Shard::kMinBytes)
    throw std::invalid_argument("ratewin: max_memory must be at least 16 KiB");
  // Up to 64 shards, each meant to hold at least 64 records and 1 MiB, so small
  // registries are not split into many tiny ones (a limiter takes up to 256 KiB).
  constexpr std::size_t kShardBytes = std::size_t{1} << 20;
  std::size_t shards = 1;
  while (shards < 64 && shards * 2 * 64 <= max_limiters && shards * 2 * kShardBytes <= max_bytes)
    shards *= 2;
  shard_mask_ = shards - 1;
  shards_ = std::make_unique<Shard[]>(shards);
  for (std::size_t i = 0; i < shards; ++i) {
    const auto share = [&](std::size_t total) {
      return total / shards + (i < total % shards ? 1 : 0);
    };
    shards_[i].configure(share(max_limiters), share(max_bytes), words, initial);
  }
}

std::size_t Registry::capacity_for(std::uint32_t subintervals) const noexcept {
  std::size_t total = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) total += shards_[i].capacity_for(subintervals);
  return total;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
