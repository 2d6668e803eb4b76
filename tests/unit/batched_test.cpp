// Batched write mode (Options::write_mode = WriteMode::batched) over the fake store: what
// reaches the store and when, the budget each engine keeps to between flushes, the merge
// of a flush's read-back, close, failed flushes, and what gives counts back.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_core.h"
#include "fake_store.h"

namespace ratewin::test {
namespace {

struct Batched : Fixture {
  std::shared_ptr<SharedCounts> shared = std::make_shared<SharedCounts>();
  Options batched() {
    Options o = options();
    o.write_mode = WriteMode::batched;
    return o;
  }
  std::unique_ptr<detail::EngineCore> engine() {
    return std::make_unique<detail::EngineCore>(batched(), std::make_unique<FakeStore>(shared));
  }
};

const Limit kLimit(1000, 1s, 100ms);

}  // namespace

TEST_CASE_FIXTURE(Batched, "admissions reach the store only in flushes, one sum per limiter") {
  shared->live = 1;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  // A limiter new to the engine is cold: its first admission is written at once, and
  // reads the whole shared window back (as in sync mode).
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 1);
  // (Its budget: a third of the 999 left, for an engine alone, 333.)
  for (int i = 0; i < 149; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  const Decision question = e->try_acquire(r, kLimit, 0);
  CHECK(question.remaining == 850);  // decided from the local counts, pending included
  CHECK(shared->calls == 1);
  CHECK(shared->total() == 1);
  CHECK(e->flush());
  CHECK(shared->calls == 2);  // the 149: one write
  CHECK(shared->total() == 150);
  CHECK(e->flush());  // nothing pending: nothing written
  CHECK(shared->calls == 2);
}

TEST_CASE_FIXTURE(Batched, "between flushes an engine admits its budget, a write through and the half budget it grants, then retries after the next") {
  shared->live = 2;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  // 999 left, two engines: together they may admit 0.276 of it in a round
  // (2/3 / (1 + 2 sqrt(1/2))), an even share of it each, 137.
  for (int i = 0; i < 137; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 1);
  // Over the budget with room in the window: the round's one write through, whose reply
  // grants half a budget from what it left (861 / 2 x 0.138: 59).
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 2);
  for (int i = 0; i < 59; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  const Decision refused = e->try_acquire(r, kLimit, 1);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.remaining == 0);
  CHECK(refused.retry_after > 0ns);
  CHECK(refused.retry_after <= 12ms);  // the next flush (every 10 ms for this window)
  for (int i = 0; i < 10; ++i) CHECK_FALSE(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 2);  // refusals never touch the store
  CHECK(e->flush());
  CHECK(shared->total() == 198);
  // 802 left. The share is weighted by this engine's part of the counts before the round
  // just flushed (none: the first was a warm start): a quarter of an even share, 27.
  // Then the write through, and half a budget from the 774 it leaves, 53.
  const auto round = [&] {
    int admitted = 0;
    while (e->try_acquire(r, kLimit, 1).allowed) ++admitted;
    CHECK(e->flush());
    return admitted;
  };
  CHECK(round() == 27 + 1 + 53);
  // 721 left. Now this engine made 197 of the 198 counted before that round: 0.75 x 0.995
  // + 0.25 x 1/2 of the 0.276, 174 (an even share would be 99); the write through, and
  // half a budget from the 546 left, 37.
  CHECK(round() == 174 + 1 + 37);
}

TEST_CASE_FIXTURE(Batched, "an engine's share is weighted by its part of the counts, a quarter of an even share at least") {
  shared->live = 2;
  auto busy = engine();
  auto quiet = engine();
  const std::uint64_t r = hash("tenant");
  const auto until_written = [&](detail::EngineCore& e) {
    const int calls = shared->calls;
    int admitted = 0;
    while (shared->calls == calls) {
      REQUIRE(e.try_acquire(r, kLimit, 1).allowed);
      ++admitted;
    }
    return admitted - 1;  // (the last was the write through)
  };
  // The busy engine: its warm start, then its even budget (999 x 0.138: 137), flushed.
  CHECK(busy->try_acquire(r, kLimit, 1).allowed);
  CHECK(until_written(*busy) == 137);
  CHECK(busy->flush());
  // The quiet one: its warm start grants an even budget, of which it admits one, flushed.
  CHECK(quiet->try_acquire(r, kLimit, 1).allowed);
  CHECK(quiet->try_acquire(r, kLimit, 1).allowed);
  CHECK(quiet->flush());
  CHECK(shared->total() == 141);
  // 859 left. The quiet engine made none of the 140 counted before its round (its
  // warm start is not its part): a quarter of an even share of the 0.276, 29 (an even
  // share would be 118).
  CHECK(until_written(*quiet) == 29);
}

TEST_CASE_FIXTURE(Batched, "a write through decides with what the engine has not flushed") {
  shared->live = 1;
  auto e = engine();
  const Limit limit(100, 1s, 100ms);
  const std::uint64_t r = hash("tenant");
  CHECK(e->try_acquire(r, limit, 1).allowed);  // written: a budget of 33 (99 / 3)
  for (int i = 0; i < 33; ++i) REQUIRE(e->try_acquire(r, limit, 1).allowed);  // pending
  // Another node (sync) takes 66: the store holds 67, this engine has 33 more.
  detail::EngineCore other(options(), std::make_unique<FakeStore>(shared));
  for (int i = 0; i < 66; ++i) REQUIRE(other.try_acquire(r, limit, 1).allowed);
  // Over the budget, written through: 67 + 33 + 1 is over the limit (the store's 68 is not).
  CHECK_FALSE(e->try_acquire(r, limit, 1).allowed);
  CHECK(e->flush());
  CHECK(shared->total() == 100);
}

TEST_CASE_FIXTURE(Batched, "a small limit among many engines: one unit while there is room, then up to three writes through a round") {
  shared->live = 4;
  auto e = engine();
  const Limit small(10, 1s, 100ms);
  const std::uint64_t r = hash("tenant");
  const auto round = [&] {
    int admitted = 0;
    while (e->try_acquire(r, small, 1).allowed) ++admitted;
    CHECK(e->flush());
    return admitted;
  };
  CHECK(e->try_acquire(r, small, 1).allowed);
  // 9 left: 0.244 split four ways is 0.55, but room for two per engine grants one. Then
  // writes through: while the half budget each reply grants rounds to nothing and the
  // window has room, another may follow, three a round at most.
  CHECK(round() == 1 + 3);
  CHECK(shared->total() == 5);
  // 5 left: no unit granted (5 < 2 x 4); three writes through.
  CHECK(round() == 3);
  CHECK(shared->total() == 8);
  // 2 left: the first write through leaves room for one, too little to write another.
  CHECK(round() == 1);
  CHECK(round() == 1);
  CHECK(shared->total() == 10);
  CHECK(round() == 0);  // full: the store refuses the round's write through
  CHECK(shared->total() == 10);
}

TEST_CASE_FIXTURE(Batched, "until the live count is read, admissions are written as in sync mode") {
  // (Budgets are shares among the engines: unknown, they could add up to several times
  // what is left.)
  auto e = engine();  // live 0: not read yet
  const std::uint64_t r = hash("tenant");
  for (int i = 0; i < 5; ++i) CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 5);
  shared->live = 1;
  // The first admission once it is known finds no budget yet: it is written, and its
  // reply grants one (a third of the 994 left: an engine alone).
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 6);
  int admitted = 0;
  while (e->try_acquire(r, kLimit, 1).allowed) ++admitted;
  // (And the round's write through, whose reply grants half a budget from the 662 left.)
  CHECK(admitted == 994 / 3 + 1 + 662 / 2 / 3);
  CHECK(shared->calls == 7);
}

TEST_CASE_FIXTURE(Batched, "a request larger than any budget is written as in sync mode") {
  // Regression: refused for want of budget at every flush, it never passed.
  shared->live = 1;
  auto e = engine();
  const Limit limit(100, 1s, 100ms);
  const std::uint64_t r = hash("tenant");
  CHECK(e->try_acquire(r, limit, 1).allowed);  // a budget of 33
  CHECK(e->try_acquire(r, limit, 40).allowed);  // more than a third of 99 could grant
  CHECK(shared->calls == 2);
  CHECK(shared->total() == 41);
  CHECK(e->try_acquire(r, limit, 60).allowed == false);  // the window refuses it, locally
  CHECK(shared->calls == 2);
}

TEST_CASE_FIXTURE(Batched, "a one-subinterval sliding window flushes its trailing epoch") {
  // Regression: counts of the epoch before now were taken as out of the window and
  // dropped, though a sliding window still counts that epoch while it slides out.
  shared->live = 1;
  auto e = engine();
  const Limit limit(600, 1s, 1s);
  const std::uint64_t r = hash("tenant");
  clock->set(1'700'000'000s + 900ms);
  for (int i = 0; i < 11; ++i) REQUIRE(e->try_acquire(r, limit, 1).allowed);  // 1 written
  clock->advance(200ms);  // the next epoch
  CHECK(e->flush());
  CHECK(shared->total() == 11);
}

TEST_CASE_FIXTURE(Batched, "a limiter gone cold writes again before it uses a budget") {
  shared->live = 1;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 1);
  clock->advance(5s);  // idle: cold again
  CHECK(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(shared->calls == 2);  // its warm start (the unwritten unit has left the window)
}

TEST_CASE_FIXTURE(Batched, "a merge adds what the engine admitted and has not written yet") {
  // Regression: a raise to the larger of the local and the shared count lost either this
  // engine's unwritten admissions or the others' counts.
  shared->live = 1;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  for (int i = 0; i < 6; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);  // 1 written, 5 pending
  const detail::LimiterKey key = detail::LimiterKey::of(r, kLimit);
  const std::int64_t epoch = clock->now().count() / (100 * 1'000'000);
  // A boundary read: the shared count is 20 (this engine's 1 and 19 of others).
  const std::array<detail::EpochCount, 1> counts{{{epoch, 20}}};
  const std::array<detail::SharedCounts, 1> windows{{{key, counts}}};
  e->merge(windows);
  CHECK(e->try_acquire(r, kLimit, 0).remaining == 1000 - 25);
  // The flush's own read-back merges the same way: 25 written, others' 19 already in.
  CHECK(e->flush());
  CHECK(e->try_acquire(r, kLimit, 0).remaining == 1000 - 25);
}

TEST_CASE_FIXTURE(Batched, "what a node ahead began in the next epoch is counted once, there") {
  // Regression: a write read back the next epoch's count (another node's clock a moment
  // ahead at a boundary) added to its own epoch's, and the local window kept the sum: once
  // there, the engine counted the next epoch's count twice, for a whole window.
  shared->live = 2;
  auto e = engine();
  const std::uint64_t r = hash("edge");
  const detail::LimiterKey key = detail::LimiterKey::of(r, kLimit);
  const std::int64_t res = 100'000'000;
  clock->advance(std::chrono::nanoseconds(res - 1'000'000));  // 1 ms before a boundary
  const std::int64_t epoch = clock->now().count() / res;
  shared->counts[{key.resource, key.resolution_ms, key.subintervals, epoch + 1}] = 30;
  // Cold: written at once. Its decision counts the 30 with this epoch's.
  const Decision first = e->try_acquire(r, kLimit, 1);
  REQUIRE(first.allowed);
  CHECK(first.remaining == 1000 - 1 - 30);
  for (int i = 0; i < 4; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(e->flush());
  clock->advance(2ms);  // the next epoch
  REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(e->flush());
  CHECK(shared->total() == 36);
  CHECK(e->try_acquire(r, kLimit, 0).remaining == 1000 - 36);
}

TEST_CASE_FIXTURE(Batched, "closing the engine flushes what is pending") {
  shared->live = 1;
  {
    auto e = engine();
    for (int i = 0; i < 40; ++i) REQUIRE(e->try_acquire(hash("tenant"), kLimit, 1).allowed);
    CHECK(shared->total() == 1);
  }
  CHECK(shared->total() == 40);
}

TEST_CASE_FIXTURE(Batched, "a failed flush keeps its counts for the next one, while they are in the window") {
  shared->live = 1;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  for (int i = 0; i < 10; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  shared->down = true;
  CHECK_FALSE(e->flush());
  shared->down = false;
  CHECK(shared->total() == 1);
  CHECK(e->flush());
  CHECK(shared->total() == 10);
  // Counts whose subinterval has left the window by the time a flush succeeds are dropped.
  for (int i = 0; i < 5; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  shared->down = true;
  CHECK_FALSE(e->flush());
  shared->down = false;
  clock->advance(2s);
  const int calls = shared->calls;
  CHECK(e->flush());
  CHECK(shared->calls == calls);
  CHECK(shared->total() == 10);
}

TEST_CASE_FIXTURE(Batched, "a refusal by a later limit gives back what is still pending") {
  shared->live = 8;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  const Limit wide(1000, 1s, 100ms);
  const Limit small(10, 2s, 200ms);  // 9 left among 8 engines: no budget at all
  const std::array<Acquisition, 2> items{{{r, wide, 1}, {r, small, 1}}};
  std::array<Decision, 2> out;
  CHECK(e->try_acquire_all(items, out) == 2);  // both cold: written at once
  CHECK(shared->total() == 2);
  // Another node (sync) fills the small limit, unseen here.
  Options sync = options();
  detail::EngineCore other(sync, std::make_unique<FakeStore>(shared));
  for (int i = 0; i < 9; ++i) REQUIRE(other.try_acquire(r, small, 1).allowed);
  // The wide limit admits in memory; the small one's write through finds it full.
  CHECK(e->try_acquire_all(items, out) == 1);
  CHECK(e->flush());
  CHECK(shared->total() == 11);  // the wide one's count was given back before it was written
  CHECK(e->try_acquire(r, wide, 0).remaining == 999);
}

TEST_CASE_FIXTURE(Batched, "refund takes from the pending counts first; reset drops them") {
  shared->live = 1;
  auto e = engine();
  const std::uint64_t r = hash("tenant");
  for (int i = 0; i < 6; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);  // 1 written, 5 pending
  CHECK(e->refund(r, kLimit, 3) == 3);
  CHECK(shared->total() == 1);
  CHECK(e->flush());
  CHECK(shared->total() == 3);
  // The budget got the refunded units back: what is left decides, as before.
  for (int i = 0; i < 4; ++i) REQUIRE(e->try_acquire(r, kLimit, 1).allowed);
  CHECK(e->reset(r, kLimit));
  CHECK(e->flush());
  CHECK(shared->total() == 0);
}

TEST_CASE_FIXTURE(Batched, "strict_window stays in sync mode: every admission is written") {
  shared->live = 1;
  auto e = engine();
  const Limit strict = kLimit.with_algorithm(Algorithm::strict_window);
  for (int i = 0; i < 5; ++i) REQUIRE(e->try_acquire(hash("tenant"), strict, 1).allowed);
  CHECK(shared->calls == 5);
  CHECK(shared->total() == 5);
}

TEST_CASE("flush_interval and write_mode are checked") {
  const auto message_of = [](std::chrono::milliseconds interval) {
    Options o;
    o.write_mode = WriteMode::batched;
    o.flush_interval = interval;
    try {
      Engine engine(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(message_of(0ms) == "accepted");
  CHECK(message_of(1ms) == "accepted");
  CHECK(message_of(1000ms) == "accepted");
  CHECK(message_of(1001ms).find("flush_interval") != std::string::npos);
  CHECK(message_of(-1ms).find("flush_interval") != std::string::npos);
  Engine local;
  CHECK(local.flush());  // (local mode: nothing to flush)
}

TEST_CASE("the flusher thread hands every admission to the store exactly once") {
  // In real time, flushing every millisecond while four threads admit: once the
  // engine is closed, the store holds exactly what was admitted (ThreadSanitizer watches
  // the hand-off between the request threads, the flusher and the merges).
  auto shared = std::make_shared<SharedCounts>();
  shared->live = 1;
  Options o;
  o.write_mode = WriteMode::batched;
  o.flush_interval = 1ms;
  const Limit limit(1'000'000'000, 10s, 1s);
  std::atomic<std::uint64_t> admitted{0};
  {
    detail::EngineCore e(o, std::make_unique<FakeStore>(shared));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::uint64_t mine = 0;
        for (int i = 0; i < 20'000; ++i) {
          const auto resource = static_cast<std::uint64_t>((i + t) % 8);
          if (e.try_acquire(resource, limit, 1).allowed) ++mine;
          if (i % 5000 == 0) (void)e.flush();  // a caller's flush beside the thread's
        }
        admitted += mine;
      });
    }
    for (std::thread& t : threads) t.join();
  }
  CHECK(admitted.load() > 0);
  CHECK(shared->total() == admitted.load());
}

}  // namespace ratewin::test
