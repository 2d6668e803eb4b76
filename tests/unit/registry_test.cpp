#include "core/registry.h"

#include <doctest/doctest.h>

#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "test_units.h"

namespace ratewin::test {
namespace {

using detail::LimiterKey;
using detail::Record;
using detail::RecordTable;
using detail::Registry;
using detail::Shard;

constexpr std::int64_t kT0 = 1'700'000'000 * kSec;

LimiterKey key(std::uint64_t resource) { return {resource, 1000, 10}; }

}  // namespace

TEST_CASE("record table: random inserts and erases agree with a std::unordered_map") {
  detail::RecordPool pool(detail::kRecordFreeLinkOffset);
  RecordTable table(pool);
  std::unordered_map<std::uint64_t, detail::RecordId> model;
  std::mt19937_64 rng(3);
  // Few distinct resources, so erases and re-inserts collide in long probe runs.
  std::uniform_int_distribution<std::uint64_t> resource(0, 3000);
  for (int step = 0; step < 60000; ++step) {
    const LimiterKey k = key(resource(rng));
    const std::size_t slot = table.find(k, k.hash());
    const auto it = model.find(k.resource);
    REQUIRE((slot != RecordTable::npos) == (it != model.end()));
    if (it == model.end()) {
      const detail::RecordId id = pool.allocate(Record::bytes_for(10));
      new (pool.address(id)) Record{k.resource, {}, k.resolution_ms, 10, 0, 0, 0};
      table.insert(id, k.hash(), 1 << 20);
      model[k.resource] = id;
    } else if (rng() % 2 == 0) {
      REQUIRE(table.id_at(slot) == it->second);
      table.erase(slot);
      pool.deallocate(it->second, Record::bytes_for(10));
      model.erase(it);
    }
    REQUIRE(table.size() == model.size());
  }
  for (const auto& [resource_id, id] : model) {
    const LimiterKey k = key(resource_id);
    const std::size_t slot = table.find(k, k.hash());
    REQUIRE(slot != RecordTable::npos);
    CHECK(table.id_at(slot) == id);
  }
  CHECK(table.size() * 4 <= table.slot_count() * 3);
}

TEST_CASE("the lock-free lookup agrees with the locked one, across growth and erasure") {
  detail::RecordPool pool(detail::kRecordFreeLinkOffset);
  RecordTable table(pool);
  std::mt19937_64 rng(8);
  std::vector<detail::RecordId> ids;
  for (std::uint64_t r = 0; r < 5000; ++r) {
    const LimiterKey k = key(r);
    const detail::RecordId id = pool.allocate(Record::bytes_for(10));
    new (pool.address(id)) Record{k.resource, {}, k.resolution_ms, 10, 0, 0, 0};
    table.insert(id, k.hash(), 1 << 20);  // grows many times: old arrays are retired
    ids.push_back(id);
    if (r % 7 == 0) {  // erase some, shifting probe runs
      const LimiterKey gone = key(r / 2);
      const std::size_t slot = table.find(gone, gone.hash());
      if (slot != RecordTable::npos) table.erase(slot);
    }
  }
  for (std::uint64_t r = 0; r < 6000; ++r) {
    const LimiterKey k = key(r);
    const std::size_t slot = table.find(k, k.hash());
    const detail::RecordRef racy = table.find_racy(k, k.hash());
    REQUIRE(static_cast<bool>(racy) == (slot != RecordTable::npos));
    if (racy) CHECK(racy.id == table.id_at(slot));
  }
}

TEST_CASE("registry splits max_limiters exactly over its shards") {
  for (std::size_t max : {1UL, 63UL, 64UL, 129UL, 1000UL, 4097UL, 1'000'000UL}) {
    Registry registry(max);
    CHECK(registry.shard_count() <= 64);
    std::size_t total = 0;
    for (std::size_t i = 0; i < registry.shard_count(); ++i) {
      Shard& s = registry.shard(i);
      std::lock_guard lock(s.mutex);
      // Fill the shard well past capacity: it holds exactly its share.
      for (std::uint64_t r = 0; r < 2 * max / registry.shard_count() + 2; ++r) {
        const LimiterKey k = key(r * 7919 + i);
        Shard::WriteSection section(s);
        s.find_or_insert(k, k.hash(), kT0, section);
      }
      total += s.size();
    }
    CHECK(total == max);
  }
  CHECK_THROWS_AS(Registry(0), std::invalid_argument);
}

TEST_CASE("eviction drops empty windows first; a shard full of live limiters keeps counts as ghosts") {
  Registry registry(64);
  REQUIRE(registry.shard_count() == 1);
  Shard& shard = registry.shard(0);
  std::lock_guard lock(shard.mutex);
  const std::int64_t r = 100'000'000;  // 100 ms, N = 10: a window is 1 s
  // Uses the limiter of `id` at t (cost 0 asks without counting); false if there was no
  // room for it.
  auto touch = [&](std::uint64_t id, std::int64_t t, std::uint64_t cost, bool force = false) {
    const LimiterKey k{id, 100, 10};
    Shard::WriteSection section(shard);
    Record* rec = shard.find_or_insert(k, k.hash(), t, section, false, force).record;
    if (rec == nullptr) return false;
    (void)rec->view().try_acquire(t, 1000, cost);
    return true;
  };
  auto held = [&](std::uint64_t id) {
    const LimiterKey k{id, 100, 10};
    return static_cast<bool>(shard.find(k, k.hash()));
  };

  SUBCASE("limiters whose windows emptied go, least recently used first") {
    for (std::uint64_t id = 0; id < 32; ++id) REQUIRE(touch(id, kT0, 1));
    const std::int64_t now = kT0 + 10 * kSec;
    for (std::uint64_t id = 100; id < 132; ++id) REQUIRE(touch(id, now - 5 * r, 1));
    REQUIRE(shard.size() == 64);
    for (std::uint64_t id = 1000; id < 1032; ++id) CHECK(touch(id, now, 1));
    CHECK(shard.size() == 64);
    CHECK(shard.evictions == 32);
    for (std::uint64_t id = 100; id < 132; ++id) CHECK(held(id));
    for (std::uint64_t id = 0; id < 32; ++id) CHECK_FALSE(held(id));
  }

  // The count the limiter of `id` holds at t (0 if it is not held).
  auto count_of = [&](std::uint64_t id, std::int64_t t) -> std::uint64_t {
    const LimiterKey k{id, 100, 10};
    const detail::RecordRef ref = shard.find(k, k.hash());
    if (!ref) return 0;
    Decision d;
    detail::SlidingWindow w = ref.record->view();
    w.advance(t);
    (void)w.evaluate(t, 1000, 0, detail::Trailing::whole, d);
    return 1000 - d.remaining;
  };

  SUBCASE("full of live limiters, a new one evicts the lightest of the oldest into a ghost") {
    const std::int64_t now = kT0 + 10 * kSec;
    // A spent quota (500) at the oldest end, then 63 limiters of one count each.
    REQUIRE(touch(7, now - 9 * r, 500));
    for (std::uint64_t id = 100; id < 163; ++id) REQUIRE(touch(id, now - 9 * r, 1));
    // 9 subintervals later every window still holds its count; a flood of new limiters
    // each gets one of its own, and pushes out the flood's, never the heavy one.
    for (std::uint64_t id = 1000; id < 1300; ++id) CHECK(touch(id, now, 1));
    CHECK(shard.size() == 64);
    CHECK(shard.full == 0);
    CHECK(shard.evictions == 0);
    CHECK(shard.evictions_active == 300);
    CHECK(held(7));
    CHECK(count_of(7, now) == 500);
  }

  SUBCASE("a limiter evicted while it counts comes back with its counts, while they count") {
    const std::int64_t now = kT0 + 10 * kSec;
    for (std::uint64_t id = 0; id < 64; ++id) REQUIRE(touch(id, now, 500));
    CHECK(touch(5000, now, 1));
    CHECK(touch(5001, now, 1));
    CHECK(shard.evictions_active == 2);
    CHECK_FALSE(held(0));
    CHECK_FALSE(held(1));
    // The ghost table's bytes count in the bound.
    CHECK(shard.bytes() > 64 * Record::bytes_for(10));
    // 5 subintervals later 0's counts are still in its window: made again, its limiter
    // starts from them. 20 later 1's have left it: its ghost counts for nothing.
    CHECK(touch(0, now + 5 * r, 0));
    CHECK(count_of(0, now + 5 * r) == 500);
    CHECK(touch(1, now + 20 * r, 0));
    CHECK(count_of(1, now + 20 * r) == 0);
  }

  SUBCASE("a ghost never holds less than its limiter did, when some of its counts had left") {
    const std::int64_t now = kT0 + 10 * kSec;
    // 0 holds 300 from 8 subintervals back and 200 from now, and is the oldest and the
    // lightest; when it is evicted 5 subintervals on, the 300 have left its window.
    REQUIRE(touch(0, now - 8 * r, 300));
    REQUIRE(touch(0, now, 200));
    for (std::uint64_t id = 1; id < 64; ++id) REQUIRE(touch(id, now, 600));
    CHECK(touch(5000, now + 5 * r, 1));
    CHECK(shard.evictions_active == 1);
    REQUIRE_FALSE(held(0));
    CHECK(touch(0, now + 6 * r, 0));
    CHECK(count_of(0, now + 6 * r) >= 200);  // (an upper bound: 500 is allowed)
    CHECK(count_of(0, now + 6 * r) <= 500);
  }

  SUBCASE("with a store's marks, a live limiter evicted leaves no ghost (the store has it)") {
    Registry marked(64, std::size_t{1} << 40, true);
    Shard& m = marked.shard(0);
    std::lock_guard marked_lock(m.mutex);
    const std::int64_t now = kT0 + 10 * kSec;
    for (std::uint64_t id = 0; id < 64; ++id) {
      const LimiterKey k{id, 100, 10};
      Shard::WriteSection section(m);
      Record* rec = m.find_or_insert(k, k.hash(), now, section, false).record;
      REQUIRE(rec != nullptr);
      (void)rec->view().try_acquire(now, 1000, 5);
    }
    const LimiterKey k{5000, 100, 10};
    Shard::WriteSection section(m);
    CHECK(m.find_or_insert(k, k.hash(), now, section, true));
    CHECK(m.evictions_active == 1);
    const std::size_t records = m.bytes();
    // (Made again cold: its first write reads the store's counts.)
    const LimiterKey k0{0, 100, 10};
    const detail::RecordRef again = m.find_or_insert(k0, k0.hash(), now, section, true);
    REQUIRE(again);
    CHECK(again.record->view().epoch() == 0);
    CHECK(m.bytes() == records);  // no ghost table was made
  }

  SUBCASE("a limiter asked about without counting holds nothing and may go") {
    const std::int64_t now = kT0 + 10 * kSec;
    REQUIRE(touch(63, now, 0));  // the least recently used
    for (std::uint64_t id = 0; id < 63; ++id) REQUIRE(touch(id, now, 1));
    CHECK(touch(500, now, 1));
    CHECK_FALSE(held(63));
    CHECK(shard.evictions == 1);
  }

  SUBCASE("pinned limiters are never evicted; forced ones go over the bounds") {
    for (std::uint64_t id = 0; id < 64; ++id) {
      const LimiterKey k{id, 100, 10};
      Shard::WriteSection section(shard);
      shard.pin(shard.find_or_insert(k, k.hash(), kT0, section));
    }
    CHECK(shard.pinned == 64);
    CHECK_FALSE(touch(5000, kT0 + 100 * kSec, 1));  // no room, and no victim
    CHECK(touch(5000, kT0 + 100 * kSec, 1, true));  // forced
    CHECK(shard.evictions == 0);
    CHECK(shard.size() == 65);
    for (std::uint64_t id = 0; id < 64; ++id) CHECK(held(id));
    // Unpinned, a limiter whose window emptied long ago is evictable again: the next
    // insertion evicts it, but the shard stays over its bound while 5000 still counts.
    const LimiterKey k3{3, 100, 10};
    shard.unpin(shard.find(k3, k3.hash()));
    CHECK(shard.pinned == 63);
    // The next insertion evicts it, and then, the shard still over its bound, 5000 that
    // still counts: the only other unpinned one.
    CHECK(touch(5001, kT0 + 100 * kSec, 1));
    CHECK(shard.evictions == 1);
    CHECK(shard.evictions_active == 1);
    CHECK(shard.size() == 64);
    CHECK_FALSE(held(3));
    CHECK_FALSE(held(5000));
    CHECK(held(5001));
  }

  SUBCASE("over capacity, the table keeps growing geometrically") {
    // 20 x capacity pinned records: inserting them stays fast and findable.
    for (std::uint64_t id = 0; id < 64 * 20; ++id) {
      const LimiterKey k{id, 100, 10};
      Shard::WriteSection section(shard);
      shard.pin(shard.find_or_insert(k, k.hash(), kT0, section, false, true));
    }
    CHECK(shard.size() == 64 * 20);
    CHECK(shard.evictions == 0);
    for (std::uint64_t id = 0; id < 64 * 20; ++id) CHECK(held(id));
    for (std::uint64_t id = 0; id < 64 * 20; ++id) {
      const LimiterKey k{id, 100, 10};
      shard.unpin(shard.find(k, k.hash()));
    }
    CHECK(touch(99999, kT0 + 100 * kSec, 1));
    CHECK(shard.size() == 64);  // back within capacity once the pins are gone
  }

  SUBCASE("using a limiter in a later subinterval makes it the most recently used") {
    const std::int64_t now = kT0 + 10 * kSec;
    for (std::uint64_t id = 0; id < 64; ++id) touch(id, now - 19 * r, 0);
    for (std::uint64_t id = 1; id < 64; id += 2) touch(id, now - 19 * r, 0);  // same epoch: no move
    for (std::uint64_t id = 0; id < 64; id += 2) touch(id, now - 18 * r, 1);  // a later one
    // Windows empty 11 subintervals after their last count: the even ones still count
    // at `now - 8r`, the odd ones never counted. Eviction takes the odd ones.
    for (std::uint64_t id = 1000; id < 1032; ++id) CHECK(touch(id, now - 8 * r, 1));
    CHECK(shard.evictions == 32);
    for (std::uint64_t id = 0; id < 64; ++id) CHECK(held(id) == (id % 2 == 0));
  }
}

// A token bucket or a log that its callers keep busy is never touched (the lock-free read
// decides it): at the oldest end of its list, live, it must not keep the empty records of
// its geometry from being evicted.
TEST_CASE("busy buckets and logs at the oldest end do not block the eviction of empty ones") {
  for (const LimiterKey geometry : {LimiterKey{0, 0, 1}, LimiterKey{0, 0, 2 * 5}}) {
    CAPTURE(geometry.subintervals);
    Registry registry(16);
    REQUIRE(registry.shard_count() == 1);
    Shard& shard = registry.shard(0);
    std::lock_guard lock(shard.mutex);
    const detail::BucketRule bucket_rule{5, kSec / 5, kSec};  // 5 a second
    const detail::LogRule log_rule{5, kSec};
    // Counts one at t on the limiter of `id` (made if it must be); false if there was no
    // room for it.
    auto count = [&](std::uint64_t id, std::int64_t t) {
      const LimiterKey k{id, geometry.resolution_ms, geometry.subintervals};
      Shard::WriteSection section(shard);
      Record* rec = shard.find_or_insert(k, k.hash(), t, section, false, false).record;
      if (rec == nullptr) return false;
      if (k.bucket()) {
        rec->bucket().add(t, 1, bucket_rule);
      } else {
        rec->log().add(t, 1, log_rule);
      }
      return true;
    };
    // 16 limiters: the first 4 stay busy, the other 12 are used once.
    for (std::uint64_t id = 0; id < 16; ++id) REQUIRE(count(id, kT0));
    std::int64_t t = kT0;
    for (int step = 0; step < 30; ++step) {
      t += kSec / 10;
      // (Busy, as the lock-free path keeps them: counted in place, never looked up.)
      for (std::uint64_t id = 0; id < 4; ++id) {
        const LimiterKey k{id, geometry.resolution_ms, geometry.subintervals};
        Record* rec = shard.find(k, k.hash()).record;
        REQUIRE(rec != nullptr);
        Shard::WriteSection section(shard);
        if (k.bucket()) {
          rec->bucket().add(t, 1, bucket_rule);
        } else {
          rec->log().add(t, 1, log_rule);
        }
      }
    }
    // The other 12 are empty by now: new limiters take their places, within a few
    // attempts each (a scan rotates at most kEmptyScan busy ones).
    int made = 0;
    for (std::uint64_t id = 100; id < 112; ++id) {
      for (int attempt = 0; attempt < 4 && !count(id, t); ++attempt) {
      }
      made += shard.find({id, geometry.resolution_ms, geometry.subintervals},
                         LimiterKey{id, geometry.resolution_ms, geometry.subintervals}.hash())
                  ? 1
                  : 0;
    }
    CHECK(made == 12);
    CHECK(shard.evictions == 12);
    for (std::uint64_t id = 0; id < 4; ++id)
      CHECK(shard.find({id, geometry.resolution_ms, geometry.subintervals},
                       LimiterKey{id, geometry.resolution_ms, geometry.subintervals}.hash()));
  }
}

TEST_CASE("a shard bounds the bytes of its limiters, geometry by geometry") {
  // One shard of 256 KiB: records of 10 and of 1000 subintervals, in lists of their own.
  Registry registry(1'000'000, 256 * 1024);
  REQUIRE(registry.shard_count() == 1);
  Shard& shard = registry.shard(0);
  std::lock_guard lock(shard.mutex);
  const std::size_t big = registry.capacity_for(1000);
  const std::size_t small = registry.capacity_for(10);
  // 4,048 bytes each: the bytes, less the table's, hold 60-odd.
  CHECK(big <= 256 * 1024 / Record::bytes_for(1000));
  CHECK(big >= 60);
  CHECK(small > 2000);
  // The first `big` fill the bytes; each one after evicts one that still counts.
  std::uint64_t added = 0;
  for (std::uint64_t id = 0; id < 1000; ++id) {
    const LimiterKey k{id, 10, 1000};
    Shard::WriteSection section(shard);
    if (shard.find_or_insert(k, k.hash(), kT0, section)) {
      shard.find(k, k.hash()).record->view().try_acquire(kT0, 5, 1);
      ++added;
    }
  }
  CHECK(added == 1000);
  CHECK(shard.size() <= big);
  CHECK(shard.size() >= big - 2);  // (less the ghost table's bytes)
  CHECK(shard.evictions_active == 1000 - shard.size());
  CHECK(shard.bytes() <= 256 * 1024);
  // Small limiters find room in what is left, then push out each other: a flood of one
  // geometry evicts its own first, not the limiters of other limits.
  const std::size_t bigs = shard.size();
  for (std::uint64_t id = 0; id < 5000; ++id) {
    const LimiterKey k{id, 100, 10};
    Shard::WriteSection section(shard);
    REQUIRE(shard.find_or_insert(k, k.hash(), kT0, section));
    shard.find(k, k.hash()).record->view().try_acquire(kT0, 5, 1);
  }
  std::size_t bigs_left = 0;
  for (std::uint64_t id = 0; id < 1000; ++id)
    bigs_left += shard.find({id, 10, 1000}, LimiterKey{id, 10, 1000}.hash()) ? 1 : 0;
  CHECK(bigs_left == bigs);
  CHECK(shard.bytes() <= 256 * 1024);
  // 11 s later every window is empty: a big one evicts without ghosts.
  const std::uint64_t live = shard.evictions_active;
  const LimiterKey k{77777, 10, 1000};
  Shard::WriteSection section(shard);
  CHECK(shard.find_or_insert(k, k.hash(), kT0 + 11 * kSec, section));
  CHECK(shard.evictions_active == live);
  CHECK(shard.evictions >= 1);
  CHECK(shard.bytes() <= 256 * 1024);
  CHECK_THROWS_AS(Registry(1, 1000), std::invalid_argument);
}

}  // namespace ratewin::test
