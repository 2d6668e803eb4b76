// The sharded, bounded registry of limiters.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/ghosts.h"
#include "core/record.h"
#include "core/record_pool.h"
#include "ratewin/decision.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// A record found in (or added to) a shard.
struct RecordRef {
  RecordId id = kNoRecord;
  Record* record = nullptr;
  explicit operator bool() const noexcept { return record != nullptr; }
};

// Open-addressing table of record ids (linear probing, backward-shift deletion, no
// tombstones). A slot is 8 bytes: the id + 1 in the low half (0 = empty) and a 16-bit
// tag of the key's hash above it, so a probe reads a record only when the tag matches.
// Home slots come from the hash's high bits by multiply-shift, so the table size need
// not be a power of two and can follow the shard's capacity closely.
//
// Lock-free readers probe it while a writer may change it: slots are SeqlockFields, and when
// the table grows the new slot array is published atomically; the old one is not freed
// but its pages are given back to the system (MADV_DONTNEED), after which it reads as
// all-empty, until the table is destroyed.
class RecordTable {
 public:
  static constexpr std::size_t npos = ~std::size_t{0};

  explicit RecordTable(const RecordPool& pool) noexcept : pool_(pool) {}
  ~RecordTable();
  RecordTable(const RecordTable&) = delete;
  RecordTable& operator=(const RecordTable&) = delete;

  std::size_t slot_count() const noexcept;
  std::size_t size() const noexcept { return size_; }
  // Bytes of the slot array now (a replaced one has given its pages back), and once one
  // more record is inserted with `max_slots`.
  std::size_t bytes() const noexcept;
  std::size_t bytes_after_insert(std::size_t max_slots) const noexcept;
  // Bytes of a slot array of `slots` slots.
  static std::size_t bytes_for(std::size_t slots) noexcept;

  // Under the lock: the slot holding `key`, or npos.
  std::size_t find(const LimiterKey& key, std::uint64_t hash) const noexcept;
  // Adds a record that is not in the table. Grows first when the load would exceed
  // 3/4; growth stops at `max_slots` unless the table is over capacity.
  void insert(RecordId id, std::uint64_t hash, std::size_t max_slots);
  void erase(std::size_t slot) noexcept;
  RecordId id_at(std::size_t slot) const noexcept;

  // Without the lock: the record that held `key` at some point during the call, or an
  // empty ref. The caller validates with the shard's version.
  RecordRef find_racy(const LimiterKey& key, std::uint64_t hash) const noexcept;
  // Hints the CPU to fetch the slot where a lookup of `hash` starts.
  void prefetch(std::uint64_t hash) const noexcept;

 private:
  struct Slots;  // a slot array in its own mapping
  static std::uint64_t tag_of(std::uint64_t hash) noexcept { return (hash >> 16) & 0xffff; }
  static RecordId id_of(std::uint64_t slot) noexcept {
    return static_cast<RecordId>((slot & 0xffffffffU) - 1);
  }
  const Record& record(std::uint64_t slot) const noexcept {
    return *reinterpret_cast<const Record*>(pool_.address(id_of(slot)));
  }
  void place(Slots& slots, std::uint64_t encoded, std::uint64_t hash) noexcept;
  void rehash(std::size_t slot_count);
  // The slot count insert() grows to, or 0 if it does not grow.
  std::size_t growth(std::size_t max_slots) const noexcept;

  const RecordPool& pool_;
  std::atomic<Slots*> slots_{nullptr};
  std::vector<std::pair<Slots*, std::size_t>> retired_;  // with their mapped bytes
  std::size_t size_ = 0;
};

// A shard: the limiters whose key hash falls here. Writers hold `mutex`; every change
// a lock-free reader could see is made inside a write section (WriteSection), which
// makes `version` odd while it lasts: a seqlock. A rejection can so be decided without
// the lock and without writing shared memory (see EngineCore::read_without_lock).
//
// Bounded by a count of records and by bytes (records, the table at its largest, and
// the ghost tables). Unpinned records form one list per window geometry, from least to
// most recently used, where a record moves to the newest end the first time it is used
// in a new subinterval; in a list the oldest records are the first whose windows empty.
// To make room, the first record whose window is empty among the kEmptyScan oldest of
// some list is evicted. When there is none, the shard is full of live limiters (a flood
// of new keys): then the lightest of the kLiveScan oldest rings or buckets (the new
// key's geometry first) is evicted, and in local mode its counts are kept as a ghost
// of its geometry (GhostTable), which a record made again for its key starts from, so
// that it is not handed a fresh quota. (In store mode the store holds its counts: made
// again, it is cold, and its first write reads them back.) Sliding logs are never
// evicted while they count; when nothing can go, find_or_insert() adds nothing (the
// engine then counts the new key against its overflow limiter). Pinned records (held
// by handles) are outside the lists and never evicted; a forced insertion (a pin, an
// overflow limiter) goes over the bounds rather than failing.
class alignas(64) Shard {
 public:
  static constexpr int kEmptyScan = 4;
  static constexpr int kLiveScan = 8;
  static constexpr std::size_t kFirstGhosts = 16;  // slots of a list's first ghost table

  Shard() : pool_(kRecordFreeLinkOffset), table_(pool_) {}
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // `records`: the most it holds; `bytes`: the memory it may use (at least
  // kMinBytes); `words`: what its records carry after their buckets (none, kMarkWords,
  // or up to kMaxWords), a new record's set to `initial`'s first `words`.
  void configure(std::size_t records, std::size_t bytes, std::uint32_t words,
                 const std::array<std::uint32_t, kMaxWords>& initial) noexcept;
  static constexpr std::size_t kMinBytes = std::size_t{16} * 1024;
  // How many limiters of `subintervals` buckets fit, alone, in this shard's bounds.
  std::size_t capacity_for(std::uint32_t subintervals) const noexcept;

  // Marks the changes made while it lives visible to lock-free readers. Requires mutex.
  // A section opens at construction, or at the first open() when constructed deferred:
  // a locked operation that ends up changing nothing leaves the version alone, so it
  // does not send every lock-free reader of the shard to the lock.
  class WriteSection {
   public:
    struct Deferred {};
    explicit WriteSection(Shard& shard) noexcept : shard_(shard) { open(); }
    WriteSection(Shard& shard, Deferred) noexcept : shard_(shard) {}
    ~WriteSection();
    WriteSection(const WriteSection&) = delete;
    WriteSection& operator=(const WriteSection&) = delete;
    void open() noexcept;

   private:
    Shard& shard_;
    std::uint64_t version_ = 0;
    bool open_ = false;
  };

  // Seqlock reading, without the lock: read_begin() returns the version (odd while a
  // writer is active: do not read then); relaxed reads of records and table follow;
  // read_valid() then tells whether they were all consistent.
  std::uint64_t read_begin() const noexcept { return version.load(std::memory_order_acquire); }
  bool read_valid(std::uint64_t before) const noexcept {
    // The reads before were acquire loads (SeqlockField): this load cannot move
    // above them.
    return version.load(std::memory_order_acquire) == before;
  }
  // Without the lock: the record that held `key` at some point during the call, or an
  // empty ref. Meaningful only if read_valid() then holds.
  RecordRef find_racy(const LimiterKey& key, std::uint64_t hash) const noexcept {
    return table_.find_racy(key, hash);
  }
  // Hints the CPU to fetch what a lookup of `key` will read: with `record` false the
  // table slot it starts at; with `record` true also the record found there (which reads
  // that slot: prefetch it first, some lookups earlier). For batches of lookups, whose
  // cache misses then overlap. Without the lock; nothing is decided from it.
  void prefetch(const LimiterKey& key, std::uint64_t hash, bool record) const noexcept {
    if (!record) {
      table_.prefetch(hash);
    } else if (const RecordRef found = table_.find_racy(key, hash)) {
      __builtin_prefetch(found.record);
      __builtin_prefetch(reinterpret_cast<const char*>(found.record) + 64);
    }
  }

  // The members below require `mutex`, and a WriteSection for those that change state.

  // The record of `key` or a new one (evicting an empty one first if the shard is full)
  // with an empty window at `now_ns`, or at epoch 0 ("never read") when `cold`. The
  // record is marked as used at `now_ns`. `section` is opened if a record is added.
  // An empty ref when the shard is full of live limiters, unless `force`.
  RecordRef find_or_insert(const LimiterKey& key, std::uint64_t hash, std::int64_t now_ns,
                           WriteSection& section, bool cold = false, bool force = false);
  // The record of `key`, or an empty ref. Does not count as a use.
  RecordRef find(const LimiterKey& key, std::uint64_t hash) const noexcept;
  // Takes a record out of eviction's reach, or puts it back. Throws std::length_error
  // past 65535 pins on one record.
  void pin(RecordRef ref);
  void unpin(RecordRef ref) noexcept;

  std::size_t size() const noexcept { return table_.size(); }
  // Memory held: live records, the table's slots and the ghost tables.
  std::size_t bytes() const noexcept { return record_bytes_ + table_.bytes() + ghost_bytes_; }
  Record* record(RecordId id) const noexcept {
    return reinterpret_cast<Record*>(pool_.address(id));
  }

  // Written by every locked operation: kept together on the first cache line.
  std::mutex mutex;
  std::atomic<std::uint64_t> version{0};

  // With a store: limiters used in a new epoch since the store last took them.
  std::vector<Activity> activity;

  // Changed rarely, under the lock.
  alignas(64) std::uint64_t evictions = 0;
  std::uint64_t evictions_active = 0;  // records evicted while they counted
  std::uint64_t full = 0;              // insertions refused: full of live limiters
  std::uint64_t pinned = 0;

 private:
  // The LRU list of one window geometry.
  struct Lru {
    std::uint32_t resolution_ms = 0;
    std::uint32_t subintervals = 0;
    RecordId oldest = kNoRecord;
    RecordId newest = kNoRecord;
    std::size_t size = 0;
    // The oldest record when the list was last searched in vain, and the earliest time
    // the records searched could be empty: until then, or until the oldest changes,
    // searching again is pointless.
    RecordId searched = kNoRecord;
    std::int64_t live_until = 0;
    // The counts of its records evicted while live (local mode): made at the first, small,
    // and made twice as large whenever a ghost that still counted is lost, up to about a
    // slot for every two records of the list (so it takes memory only under a flood).
    std::unique_ptr<GhostTable> ghosts;
  };
  bool has_room(std::size_t bytes) const noexcept {
    return table_.size() < capacity_ &&
           record_bytes_ + ghost_bytes_ + bytes + table_.bytes_after_insert(max_slots_) <=
               budget_;
  }
  // Evicts one unpinned record whose window is empty at now_ns; false if there is none.
  bool evict_one(std::int64_t now_ns);
  // Evicts the lightest of the kLiveScan oldest rings or buckets of `key`'s geometry, or
  // of another if it has none, keeping its counts as a ghost in local mode; false if
  // there is none.
  bool evict_live(const LimiterKey& key, std::int64_t now_ns);
  // Takes a record out of its list, the table and the pool.
  void drop(RecordRef ref) noexcept;
  // A new record's counts from its key's ghost, if it has one (local mode).
  void revive(Record& r, std::uint64_t hash, std::int64_t now_ns) noexcept;
  Lru* find_lru(std::uint32_t resolution_ms, std::uint32_t subintervals) noexcept;
  Lru& lru_of(const Record& r);
  void touch(RecordRef ref) noexcept;
  void unlink(RecordRef ref) noexcept;
  void link_newest(RecordRef ref) noexcept;

  std::vector<Lru> lrus_;         // one per geometry seen, in order of first use
  std::size_t capacity_ = 0;      // most records held
  std::size_t budget_ = 0;        // most bytes held
  std::size_t record_bytes_ = 0;  // bytes of the records held
  std::size_t ghost_bytes_ = 0;   // bytes of the ghost tables
  std::uint32_t words_ = 0;       // what records carry after their buckets
  // (And their values in a new record.)
  std::array<std::uint32_t, kMaxWords> initial_{};
  std::size_t max_slots_ = 0;     // table growth stops here

  // Read by every lookup, locked or not; written when they grow.
  alignas(64) RecordPool pool_;
  RecordTable table_;
};

// The shards of one engine. The bounds max_limiters and max_bytes are split over the
// shards, so the totals never exceed them (forced records aside).
class Registry {
 public:
  // `words`: what every record carries after its buckets (kMarkWords for an engine with
  // a shared store, more for what the engine keeps per limiter; at most kMaxWords), set
  // to `initial`'s first `words` in a new record. max_bytes is at least Shard::kMinBytes.
  explicit Registry(std::size_t max_limiters, std::size_t max_bytes = std::size_t{1} << 40,
                    std::uint32_t words = 0,
                    const std::array<std::uint32_t, kMaxWords>& initial = {});
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Shard& shard_for(std::uint64_t hash) noexcept { return shards_[hash & shard_mask_]; }
  std::size_t shard_count() const noexcept { return shard_mask_ + 1; }
  Shard& shard(std::size_t i) noexcept { return shards_[i]; }
  // The index of one of its shards (shard(index_of(s)) is s).
  std::size_t index_of(const Shard& shard) const noexcept {
    return static_cast<std::size_t>(&shard - shards_.get());
  }
  std::size_t max_limiters() const noexcept { return max_limiters_; }
  std::size_t max_bytes() const noexcept { return max_bytes_; }
  // How many limiters with `subintervals` buckets fit, alone, in the bounds.
  std::size_t capacity_for(std::uint32_t subintervals) const noexcept;
  // The bytes of one record with `subintervals` buckets here.
  std::size_t record_bytes(std::uint32_t subintervals) const noexcept {
    return Record::bytes_for(subintervals, words_);
  }

 private:
  std::size_t max_limiters_;
  std::size_t max_bytes_;
  std::uint32_t words_;
  std::size_t shard_mask_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
