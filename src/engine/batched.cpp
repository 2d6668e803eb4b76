// Batched write mode (engine/batched.h): the decision's parts, the flush and its merge.
//
// Every flush interval the flusher thread (or Engine::flush) takes every shard's pending
// entries, which starts a new round, writes each as one StoreWrite of the summed cost (the
// store's ordinary write: the cost added, the whole shared window read back), all in one
// batch, and merges each window read back into its limiter: the shared counts plus what
// the limiter admitted since the take (the store lacks those: a plain raise to the larger
// would lose them). From the merged window it grants the limiter's next budget (grant(): a
// share of what is left, weighted by this engine's part of the limiter's counts,
// part_of()). A write that failed is put back for the next flush, until its epoch leaves
// the window; the budget is then not renewed.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "engine/batched.h"

#include "engine/engine_core.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// The least share of its budget's whole an engine is granted, over the live engines: an
// engine that had little of the recent traffic can still admit some before its part of
// the counts shows it needs more.
constexpr double kEvenPart = 0.25;

// The share of what a window has left that `live` engines may admit together between two
// merges. Each sees its own admissions at once and the others' only at its next flush,
// one interval late: with the whole of it, K engines could together admit twice the
// limit. With a share b of it, what the window has left after round k is at least
// (1 - b) y[k-1] - b^2 (K-1)/K y[k-2]: never below 0 while b <= 1 / (1 + 2 sqrt((K-1)/K))
// (1 alone, 0.41 for two, 1/3 for many). Budgets are two thirds of that (0.28 for two,
// 0.23 for eight, 2/9 for many), so that the half budget a write through may add in a
// round (Batcher::learn) stays within it; an engine alone as last read keeps to a
// third, as another may have joined since, unseen until the next heartbeat
// (docs/design/batched-mode.md, section 3).
double budget_share(std::uint32_t live) noexcept {
  if (live <= 1) return 1.0 / 3.0;
  const double k = live;
  return 2.0 / 3.0 / (1.0 + 2.0 * std::sqrt((k - 1) / k));
}

// Whether an entry's epoch is still in its limiter's window at `now` (else its counts
// no longer matter: a failed write's are dropped).
// (The trailing subinterval, N epochs back, still counts in a sliding window.)
bool in_window(const PendingWrite& entry, std::int64_t now) noexcept {
  return entry.epoch >= SlidingWindow::epoch_of(now, entry.key.resolution_ns()) -
                            std::int64_t{entry.key.subintervals};
}

// This engine's part of a limiter's shared counts, as just read back for `entry`
// (`counts`, the entry's epoch first), over the window without this round's own counts:
// engines flush in step, so each reads back its own round but only the rounds of those
// that wrote before it; counting its own round would let the parts of K engines add up
// to more than one on a fresh window (1 + 1/2 + ... + 1/K). `own` keeps this engine's
// counts per epoch (oldest first, for the epochs still in the window): flushed, and
// written through (PendingWrite::through); the entry's are noted in it after. -1 if
// nothing is counted.
double part_of(std::vector<std::pair<std::int64_t, std::uint64_t>>& own, const PendingWrite& entry,
               std::span<const std::uint64_t> counts) {
  const std::int64_t oldest = entry.epoch - static_cast<std::int64_t>(counts.size()) + 1;
  std::erase_if(own, [&](const auto& e) { return e.first < oldest; });
  std::uint64_t mine = 0;
  for (const auto& e : own)
    if (e.first <= entry.epoch) mine += e.second;
  const std::uint64_t round = entry.delta + entry.through;  // (in counts[0])
  std::uint64_t all = 0;
  for (const std::uint64_t count : counts) all += count;
  all -= std::min(all, round);
  if (round != 0) {
    const auto at = std::find_if(own.begin(), own.end(),
                                 [&](const auto& e) { return e.first >= entry.epoch; });
    if (at != own.end() && at->first == entry.epoch) {
      at->second += round;
    } else {
      own.insert(at, {entry.epoch, round});
    }
  }
  return all == 0 ? -1 : static_cast<double>(std::min(mine, all)) / static_cast<double>(all);
}

}  // namespace

Batcher::Batcher(EngineCore& engine)
    : engine_(engine),
      lanes_(std::make_unique<Lane[]>(engine.registry_.shard_count())),
      flush_period_ns_(engine.options_.flush_interval > std::chrono::milliseconds::zero()
                           ? engine.options_.flush_interval / std::chrono::nanoseconds(1)
                           : std::int64_t{50'000'000}) {}

Batcher::~Batcher() { stop(); }

void Batcher::start() {
  if (dynamic_cast<const ManualClock*>(engine_.clock_.get()) == nullptr)
    flusher_ = std::thread([this] { flusher_loop(); });
}

void Batcher::stop() noexcept {
  if (!flusher_.joinable()) return;
  {
    std::lock_guard lock(flusher_mutex_);
    flusher_stop_ = true;
  }
  flusher_wake_.notify_all();
  flusher_.join();
}

Batcher::Lane& Batcher::lane(const Shard& shard) const noexcept {
  return lanes_[engine_.registry_.index_of(shard)];
}

bool Batcher::applies(const LimiterKey& key, const Limit& limit) const noexcept {
  return key.ring() && limit.algorithm() != Algorithm::strict_window &&
         engine_.store_->live_nodes() != 0;
}

bool Batcher::read(const Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
                   std::uint64_t cost, std::int64_t now, Decision& out) const noexcept {
  if (!applies(key, limit)) return true;
  // The counts allow it, this engine's budget may not. A refusal for want of budget is
  // decided here once the limiter is noted for the next flush (which renews the budget);
  // the first one of a round takes the lock to note it.
  const std::uint32_t left = budget(record, key.subintervals).load();
  if (left == kNoBudget || cost <= left) return true;
  // (Under the lock: a request too large for any budget, or the round's first over it,
  // which is written through.)
  if (!grantable(cost, out.remaining + cost) || !spilled(lane(shard), record, key)) return false;
  out.allowed = false;
  out.remaining = left;
  out.retry_after = until_flush(now);
  return true;
}

Batcher::Ticket Batcher::decide(Shard& shard, Record& record, const LimiterKey& key,
                                const Limit& limit, std::int64_t now, std::uint64_t cost,
                                bool degraded, bool cold, std::int64_t epoch, bool& fits,
                                Decision& d, Shard::WriteSection& section) {
  if (cold) {
    // Its budget went stale with its counts; the warm start grants the next, and until
    // then its admissions are written too.
    section.open();
    budget(record, key.subintervals) = kNoBudget;
  }
  // Decided here, within this engine's budget; while the store is unreachable, the
  // failure policies rule as in sync mode (nothing is queued). Written as in sync mode
  // instead: a limiter without a budget (cold, new or reset: its write's reply grants
  // one), a request larger than any budget could be, and, once per flush round (up to
  // kThroughs times while the budgets round to nothing: learn()), a request over the
  // budget that the window has room for (so that a budget spent by a short burst does not
  // refuse what the limit allows).
  Ticket ticket;
  if (degraded || cost == 0 || !applies(key, limit)) return ticket;
  Bucket& units = budget(record, key.subintervals);
  ticket.grant = cold || units.load() == kNoBudget;
  ticket.batched = !ticket.grant && (!fits || grantable(cost, d.remaining + cost));
  if (ticket.batched && fits && cost > units.load()) {
    section.open();
    if (spill(shard, record, key, limit, epoch)) {
      ticket.batched = false;  // this round's write through
      ticket.through = true;
      ticket.round = lane(shard).round.load();
    } else {
      // Refused until the next flush renews the budget (the limiter is noted for it:
      // later refusals this round are decided without the lock).
      fits = false;
      d.allowed = false;
      d.remaining = units.load();
      d.retry_after = until_flush(now);
    }
  }
  if (ticket.batched && fits && d.allowed) {
    section.open();
    units -= static_cast<std::uint32_t>(cost);
    queue(shard, record, key, limit, epoch, cost, false);
  }
  return ticket;
}

void Batcher::learn(Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
                    const Ticket& ticket, std::int64_t epoch, std::int64_t now,
                    std::uint64_t cost, std::span<const std::uint64_t> counts,
                    std::uint64_t ahead, SlidingWindow& own, SlidingWindow& window) {
  // (A write through whose round is still the shard's.)
  Lane& l = lane(shard);
  const bool this_round = ticket.through && l.round.load() == ticket.round;
  // What this engine admitted and has not flushed is in neither count: the write's own
  // counts decide with it, and the local window learns it (a raise: the shared counts
  // alone were merged already).
  const Pending p = pending(shard, record, key);
  if (p.delta != 0) {
    const std::int64_t k = epoch - p.epoch;
    if (k >= 0 && static_cast<std::size_t>(k) < counts.size()) {
      const std::uint64_t shared = counts[static_cast<std::size_t>(k)] + p.delta;
      own.merge(p.epoch, shared + (k == 0 ? ahead : 0));
      window.merge(p.epoch, shared);
    } else if (k == -1 && ahead != 0 && window.epoch() > epoch) {
      window.merge(p.epoch, ahead + p.delta);
    }
  }
  // A limiter without a budget gets its first (without the carry, which only flushes
  // keep). A write through's reply, as fresh as a flush's, grants half a budget if that is
  // more than what is left of this round's: a round's burst past its budget is not refused
  // while the window has room, and an engine admits at most one and a half budgets a
  // round (budget_share). Where that rounds to nothing (a small limit over several
  // engines) and the window still has room, the next request over the budget may be
  // written through too, up to kThroughs a round: a Poisson pair at one engine is not
  // refused what the limit allows, and a full window still costs one write a round. (A
  // reply that comes after a flush began the next round leaves that round's budget
  // alone.)
  Decision left;
  if ((ticket.grant || this_round) &&
      window.evaluate(now, limit.max(), 0, trailing_of(limit.algorithm()), left)) {
    double carry = 0;
    std::uint64_t room = left.allowed ? left.remaining : 0;
    if (window.epoch() == epoch) room -= std::min(room, ahead);  // (not room: RingReply)
    const std::uint32_t fresh = grant(ticket.grant ? room : room / 2, carry);
    Bucket& units = budget(record, key.subintervals);
    if (ticket.grant || (units.load() != kNoBudget && fresh > units.load())) units = fresh;
    PendingWrite* entry =
        this_round && fresh == 0 && room > 1 ? pending_of(l, record, key) : nullptr;
    if (entry != nullptr && entry->throughs < kThroughs) mark_spilled(record, key, false);
  }
  // What the round wrote through, if the write's own counts admit it, is this engine's
  // part of the counts too (part_of).
  Decision shared;
  if (this_round && cost != 0 &&
      (own.evaluate(now, limit.max(), 0, trailing_of(limit.algorithm()), shared),
       shared.allowed)) {
    PendingWrite* entry = pending_of(l, record, key);
    if (entry != nullptr && entry->epoch == epoch)
      entry->through += static_cast<std::uint32_t>(cost);
  }
}

void Batcher::give_back(const LimiterKey& key, std::uint64_t hash, const Limit& limit,
                        std::uint64_t cost, std::int64_t epoch, AsyncWriter* async) {
  std::uint64_t flushed = cost;
  {
    Shard& shard = engine_.registry_.shard_for(hash);
    std::lock_guard lock(shard.mutex);
    if (const RecordRef found = shard.find(key, hash)) {
      Shard::WriteSection section(shard);
      found.record->take_back(epoch, engine_.now_ns(), cost, BucketRule::of(limit));
      add_budget(*found.record, key, cost);
      flushed -= take_pending(shard, *found.record, key, epoch, cost);
    }
  }
  if (flushed != 0) {
    engine_.remove(store_write(key, epoch, engine_.now_ns(), flushed, false, limit), async);
  }
}

void Batcher::reset(Shard& shard, Record& record, const LimiterKey& key) noexcept {
  if (PendingWrite* entry = pending_of(lane(shard), record, key)) entry->delta = 0;
  budget(record, key.subintervals) = kNoBudget;
}

std::uint64_t Batcher::take_pending(Shard& shard, Record& record, const LimiterKey& key,
                                    std::int64_t epoch, std::uint64_t count) noexcept {
  PendingWrite* entry = pending_of(lane(shard), record, key);
  if (entry == nullptr || entry->epoch != epoch) return 0;
  const std::uint64_t taken = std::min(entry->delta, count);
  entry->delta -= taken;
  return taken;
}

Batcher::Pending Batcher::pending(const Shard& shard, Record& record,
                                  const LimiterKey& key) const noexcept {
  const PendingWrite* entry = pending_of(lane(shard), record, key);
  return entry != nullptr ? Pending{entry->epoch, entry->delta} : Pending{};
}

void Batcher::add_budget(Record& record, const LimiterKey& key, std::uint64_t units) noexcept {
  Bucket& left = budget(record, key.subintervals);
  if (left.load() == kNoBudget) return;
  left = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(std::uint64_t{left.load()} + units, kNoBudget - 1));
}

void Batcher::add_stats(Stats& s) const noexcept {
  s.flushes = flushes_.load(std::memory_order_relaxed);
  s.flush_failures = flush_failures_.load(std::memory_order_relaxed);
  s.flushed_units = flushed_units_.load(std::memory_order_relaxed);
}

std::int64_t Batcher::flush_ns(const LimiterKey& key) const noexcept {
  const Options& options = engine_.options_;
  if (options.flush_interval > std::chrono::milliseconds::zero())
    return options.flush_interval / std::chrono::nanoseconds(1);
  // A 40th of the window (so that a limiter at 80% of its limit is not held back by its
  // budget), between 10 and 50 ms where a 20th of the resolution allows, at least 1 ms.
  constexpr std::int64_t kMs = 1'000'000;
  const std::int64_t r = key.resolution_ns();
  const std::int64_t w = r * key.subintervals;
  const std::int64_t f = std::min({50 * kMs, std::max(10 * kMs, r / 20), w / 40});
  return std::max(kMs, f);
}

PendingWrite* Batcher::pending_of(Lane& lane, Record& record,
                                  const LimiterKey& key) const noexcept {
  if (!noted(lane, record, key)) return nullptr;
  const std::size_t index = (pending_index(record, key.subintervals).load() & kPendingIndex) - 1;
  if (index >= lane.pending.size() || !(lane.pending[index].key == key)) return nullptr;
  return &lane.pending[index];
}

void Batcher::queue(Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
                    std::int64_t epoch, std::uint64_t delta, bool starved) {
  Lane& l = lane(shard);
  std::uint8_t throughs = 0;
  bool was_spilled = false;
  if (PendingWrite* entry = pending_of(l, record, key)) {
    if (entry->epoch == epoch) {
      entry->delta += delta;
      entry->starved = entry->starved || starved;
      // (Limits of one scope and geometry share the limiter: the budget is the least's.)
      entry->max = std::min(entry->max, limit.max());
      return;
    }
    // (The round's writes through so far stay counted.)
    throughs = entry->throughs;
    was_spilled = spilled(l, record, key);
  }
  // (A limiter whose counts straddle a boundary has an entry per epoch; the record names
  // the newest.)
  PendingWrite entry{key, epoch, delta, limit.max(), trailing_of(limit.algorithm()),
                     record.store_mark() != Record::mark_of(epoch), starved};
  entry.throughs = throughs;
  note(l, record, key, entry);
  if (was_spilled && noted(l, record, key)) mark_spilled(record, key, true);
  // The flusher wakes at the shortest interval of the geometries it has to flush.
  const std::int64_t f = flush_ns(key);
  std::int64_t period = flush_period_ns_.load(std::memory_order_relaxed);
  while (f < period &&
         !flush_period_ns_.compare_exchange_weak(period, f, std::memory_order_relaxed)) {
  }
}

void Batcher::note(Lane& lane, Record& record, const LimiterKey& key, const PendingWrite& entry) {
  lane.pending.push_back(entry);
  if (lane.pending.size() <= kPendingIndex) {
    pending_index(record, key.subintervals) = static_cast<std::uint32_t>(lane.pending.size());
    pending_round(record, key.subintervals) = lane.round.load();
  }
}

bool Batcher::spill(Shard& shard, Record& record, const LimiterKey& key, const Limit& limit,
                    std::int64_t epoch) {
  Lane& l = lane(shard);
  queue(shard, record, key, limit, epoch, 0, true);
  if (!noted(l, record, key)) return false;  // (no room to note it: refused)
  if (spilled(l, record, key)) return false;
  mark_spilled(record, key, true);
  if (PendingWrite* entry = pending_of(l, record, key)) ++entry->throughs;
  return true;
}

bool Batcher::grantable(std::uint64_t cost, std::uint64_t left) const noexcept {
  const std::uint32_t live = std::max<std::uint32_t>(engine_.store_->live_nodes(), 1);
  const double most = std::floor(static_cast<double>(left) * budget_share(live) / live) + 1;
  return static_cast<double>(cost) <= most;
}

std::uint32_t Batcher::grant(std::uint64_t left, double& carry, double weight) const noexcept {
  const std::uint32_t live = std::max<std::uint32_t>(engine_.store_->live_nodes(), 1);
  const double even = 1.0 / live;
  const double share =
      budget_share(live) *
      (weight >= 0 ? (1 - kEvenPart) * std::min(weight, 1.0) + kEvenPart * even : even);
  if (left == 0) {
    carry = 0;
    return 0;
  }
  const double exact = static_cast<double>(left) * share + carry;
  double whole = std::floor(exact);
  carry = exact - whole;
  // One unit while the window has room for two per engine: a small limit shared by many
  // engines would otherwise grant nothing for rounds on end.
  if (whole < 1 && left >= 2 * std::uint64_t{live}) {
    whole = 1;
    carry = 0;
  }
  return static_cast<std::uint32_t>(std::min(whole, double{kNoBudget - 1}));
}

bool Batcher::flush() {
  Registry& registry = engine_.registry_;
  std::lock_guard guard(flush_mutex_);
  ++flush_round_;
  std::vector<PendingWrite> taken;
  const std::int64_t start = engine_.now_ns();
  for (std::size_t i = 0; i < registry.shard_count(); ++i) {
    Shard& shard = registry.shard(i);
    Lane& l = lanes_[i];
    std::lock_guard lock(shard.mutex);
    std::copy_if(l.pending.begin(), l.pending.end(), std::back_inserter(taken),
                 [start](const PendingWrite& entry) { return in_window(entry, start); });
    l.pending.clear();
    // A new round: the records' references to the entries taken no longer hold.
    l.round = l.round.load() + 1;
  }
  bool ok = true;
  if (!taken.empty()) {
    std::vector<StoreWrite> writes(taken.size());
    std::vector<std::span<std::uint64_t>> counts(taken.size());
    std::size_t total = 0;
    for (const PendingWrite& entry : taken) total += entry.key.counts_size();
    std::vector<std::uint64_t> windows(total);
    const auto written = std::make_unique<bool[]>(taken.size());
    std::size_t at = 0;
    for (std::size_t i = 0; i < taken.size(); ++i) {
      const PendingWrite& entry = taken[i];
      // (Only starved: a read, renewing the budget.)
      writes[i] = StoreWrite{entry.key, entry.epoch, entry.delta, entry.first && entry.delta != 0};
      counts[i] = std::span<std::uint64_t>(windows).subspan(at, entry.key.counts_size());
      at += entry.key.counts_size();
    }
    engine_.store_->add_all(writes, counts, std::span<bool>(written.get(), taken.size()));
    const std::int64_t now = engine_.now_ns();
    std::uint64_t units = 0;
    for (std::size_t i = 0; i < taken.size(); ++i) {
      if (written[i]) {
        units += taken[i].delta;
        merge_flushed(taken[i], counts[i], now);
      } else {
        ok = false;
        requeue(taken[i], now);
      }
    }
    flushed_units_.fetch_add(units, std::memory_order_relaxed);
    (ok ? flushes_ : flush_failures_).fetch_add(1, std::memory_order_relaxed);
  }
  // Carries of limiters not flushed for a while are forgotten.
  constexpr std::uint64_t kForget = 256;
  if (flush_round_ % kForget == 0) {
    std::erase_if(carries_, [&](const auto& c) { return c.second.round + kForget < flush_round_; });
  }
  return ok;
}

void Batcher::merge_flushed(const PendingWrite& entry, std::span<const std::uint64_t> reply,
                               std::int64_t now) {
  // The entry's epoch and those before it; what a node ahead began in the next (RingReply)
  // is learned as that epoch's once the window has reached it, and is no room before.
  const std::span<const std::uint64_t> counts = RingReply::window(reply);
  const std::uint64_t ahead = RingReply::ahead(reply);
  Carry& carry = carries_[entry.key];
  carry.round = flush_round_;
  // (Before the record is looked for: an evicted limiter's counts are still its own.)
  const double part = part_of(carry.own, entry, counts);
  const std::uint64_t hash = entry.key.hash();
  Shard& shard = engine_.registry_.shard_for(hash);
  std::lock_guard lock(shard.mutex);
  const RecordRef found = shard.find(entry.key, hash);
  if (!found) return;  // evicted: its counts are in the store, which it starts from again
  Record& record = *found.record;
  Shard::WriteSection section(shard);
  SlidingWindow window = record.view();
  // Its first write in the epoch is done (unless the window moved on: a mark never goes
  // back).
  if (entry.first && entry.delta != 0 && window.epoch() == entry.epoch)
    record.store_mark() = Record::mark_of(entry.epoch);
  const Pending p = pending(shard, record, entry.key);
  for (std::size_t k = 0; k < counts.size(); ++k) {
    const std::int64_t e = entry.epoch - static_cast<std::int64_t>(k);
    window.merge(e, counts[k] + p.at(e));
  }
  if (!window.current_at(now)) {
    window.advance(now);
    shard.activity.push_back({entry.key, SlidingWindow::epoch_of(now, entry.key.resolution_ns())});
  }
  const bool reached = window.epoch() > entry.epoch;
  if (ahead != 0 && reached)
    window.merge(entry.epoch + 1, ahead + p.at(entry.epoch + 1));
  Decision left;
  window.evaluate(now, entry.max, 0, entry.trailing, left);  // (at now's epoch: cannot fail)
  std::uint64_t room = left.allowed ? left.remaining : 0;
  if (!reached) room -= std::min(room, ahead);
  budget(record, entry.key.subintervals) = grant(room, carry.carry, part);
}

void Batcher::requeue(const PendingWrite& entry, std::int64_t now) {
  // Nothing to write (a read for a starved limiter), or out of its window by now.
  if (entry.delta == 0 || !in_window(entry, now)) return;
  const std::uint64_t hash = entry.key.hash();
  Shard& shard = engine_.registry_.shard_for(hash);
  Lane& l = lane(shard);
  std::lock_guard lock(shard.mutex);
  const RecordRef found = shard.find(entry.key, hash);
  if (!found) {
    l.pending.push_back(entry);  // (flushed all the same: the record is gone)
    return;
  }
  // Into the limiter's entry of this round for that epoch, so that what takes from
  // pending counts (give-backs, refund, reset, merges) sees it.
  Shard::WriteSection section(shard);
  PendingWrite* same = pending_of(l, *found.record, entry.key);
  if (same == nullptr) {
    PendingWrite again = entry;
    again.throughs = 0;  // (this round's writes through are counted afresh)
    note(l, *found.record, entry.key, again);
  } else if (same->epoch == entry.epoch) {
    same->delta += entry.delta;
    same->first = same->first || entry.first;
  } else {
    l.pending.push_back(entry);  // (older: the record keeps naming the newer entry)
  }
}

void Batcher::flusher_loop() {
  std::unique_lock lock(flusher_mutex_);
  while (!flusher_stop_) {
    // On multiples of the period, on the store's clock: engines flush in step.
    const std::int64_t period = flush_period_ns_.load(std::memory_order_relaxed);
    const std::int64_t now = engine_.now_ns();
    const std::int64_t wait = period - now % period;
    if (flusher_wake_.wait_for(lock, std::chrono::nanoseconds(wait),
                               [this] { return flusher_stop_; }))
      break;
    lock.unlock();
    (void)flush();
    lock.lock();
  }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
