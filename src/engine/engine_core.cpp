#include "engine/engine_core.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/acquire_all.h"
#include "engine/admission.h"
#include "engine/batched.h"
#include "engine/last_read.h"
#include "engine/scratch.h"
#include "internal/ratewin_internal/engine_options.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

std::atomic<std::uint64_t> next_engine_id{1};

// Throws std::invalid_argument naming the first option out of range (the ranges and
// names are engine_options.h's): a zero deadline would fail every call at once, and a
// brace in the prefix would change which part of a key Redis Cluster hashes.
void validate(const Options& o) {
  static_assert(internal::option_range("max_memory").min == detail::Shard::kMinBytes);
  if (std::string problem = internal::options_problem(o); !problem.empty())
    throw std::invalid_argument("ratewin::Options: " + problem);
}

// The records' words after their buckets: the store mark with a store, and batched write
// mode's two.
std::uint32_t record_words(const Options& o, bool store) noexcept {
  if (!store && o.redis.empty()) return 0;
  return o.write_mode == WriteMode::batched ? Batcher::kWords : kMarkWords;
}

// `limit`'s share among `live` nodes, `share` x max / live (at least 1), in its scope and
// window (so it decides from the same counts); a token bucket's burst in proportion too.
// `limit` itself when the share is the whole, or could not be made.
Limit split_limit(const Limit& limit, std::uint32_t live, double share) noexcept {
  const double scale = share / static_cast<double>(live);
  if (!(scale < 1.0)) return limit;
  const auto part = [scale](std::uint64_t v) {
    const double x = std::floor(static_cast<double>(v) * scale);
    return x < 1.0 ? std::uint64_t{1} : static_cast<std::uint64_t>(x);
  };
  try {
    Limit out = limit;
    if (limit.algorithm() == Algorithm::token_bucket && limit.burst() != limit.max())
      out = out.with_burst(part(limit.burst()));
    return out.with_max(part(limit.max()));
  } catch (...) {  // (a bucket that would refill too slowly)
    return limit;
  }
}

}  // namespace

// Warnings and errors to stderr: what an engine without a logger reports.
void log_to_stderr(LogLevel level, std::string_view message) {
  if (level < LogLevel::warning) return;
  std::fprintf(stderr, "ratewin: %s: %.*s\n", level == LogLevel::error ? "error" : "warning",
               static_cast<int>(message.size()), message.data());
}

EngineCore::EngineCore(Options options, std::unique_ptr<Store> store)
    : id_(next_engine_id.fetch_add(1, std::memory_order_relaxed)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : system_clock()),
      system_clock_(dynamic_cast<const SystemClock*>(clock_.get()) != nullptr),
      // With a shared store, records carry the mark of the epoch last written.
      registry_((validate(options_), options_.max_limiters), options_.max_memory,
                record_words(options_, store != nullptr), Batcher::kInitial) {
  if (!options_.logger) options_.logger = log_to_stderr;
  if (options_.write_mode == WriteMode::batched && (store != nullptr || !options_.redis.empty()))
    batcher_ = std::make_unique<Batcher>(*this);
  // Made last: its thread calls back into the registry.
  store_ = store != nullptr ? std::move(store) : make_store(options_, clock_, *this);
  if (batcher_ != nullptr) batcher_->start();
}

EngineCore::~EngineCore() {
  if (batcher_ != nullptr) {
    batcher_->stop();
    // What was admitted and not yet written goes to the store before it closes.
    (void)batcher_->flush();
  }
  if (store_ != nullptr) store_->shutdown();
}

bool EngineCore::flush() { return batcher_ == nullptr || batcher_->flush(); }

[[gnu::always_inline]] inline std::uint64_t EngineCore::read_without_lock(
    Shard& shard, const LimiterKey& key, std::uint64_t hash, RecordRef& ref, std::int64_t now,
    const Limit& limit, std::uint64_t cost, Decision& out, const std::uint64_t* caller) noexcept {
  const std::uint64_t before = shard.read_begin();
  if ((before & 1) != 0) return 1;
  LastRead& last = last_read;
  const bool unchanged = last.engine == id_ && last.version == before && last.key == key;
  if (unchanged && cost == 1 && now < last.rejects_until && last.limit.same(limit)) {
    last.rejection(now, limit, out);
    return before;
  }
  if (!ref) {
    ref = unchanged ? last.ref : shard.find_racy(key, hash);
    if (!ref) return 1;
  }
  std::int64_t epoch_end = std::numeric_limits<std::int64_t>::max();
  if (key.bucket()) {
    // (A bucket or a log has no epochs: its rejection holds until its retry time.)
    TokenBucket(ref.record->window).evaluate(now, BucketRule::of(limit), cost, out);
    if (!shard.read_valid(before)) return 1;
  } else if (key.log()) {
    const SlidingLog log = ref.record->log(key);
    log.evaluate(now, LogRule::of(limit), cost, out);
    // (A refusal that rests on the store's count holds only while that count is trusted.)
    const std::int64_t trusted = log.trusted_until();
    if (!shard.read_valid(before)) return 1;
    epoch_end = trusted;
  } else {
    const SlidingWindow window = ref.record->view(key);
    if (!window.evaluate(now, limit.max(), cost, trailing_of(limit.algorithm()), out)) return 1;
    const std::int64_t epoch = window.epoch();
    // (Batched: this engine's budget may refuse what the counts allow.)
    if (batcher_ != nullptr && out.allowed && cost != 0 &&
        !batcher_->read(shard, *ref.record, key, limit, cost, now, out))
      return 1;
    if (!shard.read_valid(before)) return 1;
    // Validated: the values are consistent, the arithmetic below cannot overflow.
    epoch_end = (epoch + 1) * key.resolution_ns();
  }
  const std::int64_t retry_at = out.retry_after == Decision::kNever
                                    ? std::numeric_limits<std::int64_t>::max()
                                    : now + out.retry_after.count();
  last.engine = id_;
  last.version = before;
  last.shard = &shard;
  last.key = key;
  last.ref = ref;
  last.limit.assign(limit);
  last.rejects_until = (!out.allowed && cost == 1) ? std::min(retry_at, epoch_end)
                                                   : std::numeric_limits<std::int64_t>::min();
  last.retry_at = retry_at;
  last.reset_at = now + out.reset_after.count();
  last.caller_known = caller != nullptr;
  last.caller = caller != nullptr ? *caller : 0;
  return before;
}

[[gnu::always_inline]] inline Decision EngineCore::decide(Shard& shard, LimiterKey& key,
                                                          std::uint64_t& hash, RecordRef known,
                                                          std::int64_t now, const Limit& limit,
                                                          std::uint64_t cost, Counted* counted,
                                                          std::optional<Admission>* defer,
                                                          const std::uint64_t* caller) {
  bool degraded = false;
  if (store_ != nullptr) {
    degraded = !store_->available(key.resource);
    // (Out of line: the partitioned policy has work to do only during an outage and for a
    // window after it.)
    if (limit.failure_policy() == FailurePolicy::partitioned &&
        (degraded || (!ledger_.empty() && key.ring())))
      return decide_partitioned(shard, key, hash, known, now, limit, cost, counted, defer,
                                degraded);
  }
  return decide_as(shard, key, hash, known, now, limit, limit.failure_policy(), cost, counted,
                   defer, degraded, caller);
}

[[gnu::always_inline]] inline Decision EngineCore::decide_as(
    Shard& shard, LimiterKey& key, std::uint64_t& hash, RecordRef known, std::int64_t now,
    const Limit& limit, FailurePolicy policy, std::uint64_t cost, Counted* counted,
    std::optional<Admission>* defer, bool degraded, const std::uint64_t* caller) {
  RecordRef ref = known;
  Decision d;
  std::uint64_t version = 1;  // nothing read yet
  if (degraded && policy != FailurePolicy::local) {
    if (policy == FailurePolicy::closed) {
      // Nothing can be vouched for without the store: reject, without counting.
      d.limit = limit.burst();
      d.degraded = true;
      d.retry_after = std::max(store_->retry_hint(), std::chrono::nanoseconds(1));
      count(d, limit);
      return d;
    }
    // FailurePolicy::open: allowed whatever the counts say, decided under the lock.
  } else {
    version = read_without_lock(shard, key, hash, ref, now, limit, cost, d, caller);
    if ((version & 1) == 0 && !d.allowed) {
      // A rejection changes nothing: it is decided from local state, without the lock.
      d.degraded = degraded;
      count(d, limit);
      return d;
    }
  }
  bool overflowed = false;
  if (defer != nullptr) {
    Admission& admission = defer->emplace(*this, shard, key, hash, now, limit, cost, degraded);
    if (admission.begin(known, ref, version, d)) return d;  // the caller writes and finishes
    overflowed = admission.overflowed();
    if (!overflowed) {
      d = admission.conclude();
      if (counted != nullptr) *counted = admission.counted();
    }
    defer->reset();
  } else {
    Admission admission(*this, shard, key, hash, now, limit, cost, degraded);
    d = admission.run(known, ref, version, d);
    overflowed = admission.overflowed();
    if (!overflowed && counted != nullptr) *counted = admission.counted();
  }
  if (!overflowed) return d;
  return overflow(key, hash, now, limit, cost, counted, defer);
}

Decision EngineCore::decide_partitioned(Shard& shard, LimiterKey& key, std::uint64_t& hash,
                                        RecordRef known, std::int64_t now, const Limit& limit,
                                        std::uint64_t cost, Counted* counted,
                                        std::optional<Admission>* defer, bool degraded) {
  if (degraded) {
    std::optional<Limit> split;
    const FailurePolicy policy = partition(limit, split);
    if (!split) {
      // (As Options::partitioned_unknown says: local or closed.)
      return decide_as(shard, key, hash, known, now, limit, policy, cost, counted, defer,
                       degraded, nullptr);
    }
    // (The split limit is partitioned too: decided as local, with its smaller max.)
    Decision d = decide(shard, key, hash, known, now,
                        split->with_failure_policy(FailurePolicy::local), cost, counted, defer);
    if (d.allowed && !d.would_reject && cost != 0 && key.ring())
      ledger_.note(hash, now, cost, limit.interval() / std::chrono::nanoseconds(1));
    return d;
  }
  if (store_->back_for(key.resource) < limit.interval() / std::chrono::nanoseconds(1) + kRejoinNs)
    return after_outage(shard, key, hash, known, now, limit, cost, counted, defer);
  ledger_.clear_if_done(now, kRejoinNs);
  // (Not degraded: decided as local.)
  return decide_as(shard, key, hash, known, now, limit, FailurePolicy::local, cost, counted, defer,
                   false, nullptr);
}

FailurePolicy EngineCore::partition(const Limit& limit, std::optional<Limit>& split) {
  const std::uint32_t live = store_->live_nodes();
  if (live != 0) {
    split.emplace(split_limit(limit, live, options_.partition_share));
    return FailurePolicy::local;
  }
  if (!partition_unknown_logged_.exchange(true, std::memory_order_relaxed)) {
    options_.logger(LogLevel::warning,
                    std::string("the store is unreachable and the live-node count was never "
                                "read: limits under the partitioned failure policy decide as ") +
                        (options_.partitioned_unknown == FailurePolicy::closed ? "closed"
                                                                               : "local") +
                        " until it is");
  }
  return options_.partitioned_unknown;
}

Decision EngineCore::after_outage(Shard& shard, LimiterKey& key, std::uint64_t& hash,
                                 RecordRef known, std::int64_t now, const Limit& limit,
                                 std::uint64_t cost, Counted* counted,
                                 std::optional<Admission>* defer) {
  const std::int64_t window = limit.interval() / std::chrono::nanoseconds(1);
  std::int64_t oldest = INT64_MAX;
  const std::uint64_t own = ledger_.since(hash, now - window, oldest);
  // Each node keeps to its share of every window until the others are surely back too (a
  // node reconnects within about 2 s of the store's return), counting what it admits in
  // the ledger: the store lacks what the nodes admitted without it, and the nodes not
  // back yet still admit their shares. The store's counts decide as well.
  const std::uint32_t live = store_->live_nodes();
  const std::uint64_t share =
      live == 0 ? limit.max() : split_limit(limit, live, options_.partition_share).max();
  if (own + cost > share) {
    Decision d;
    d.limit = share;
    d.retry_after = std::chrono::nanoseconds(std::max<std::int64_t>(1, oldest + window - now));
    d.reset_after = d.retry_after;
    count(d, limit);
    return d;
  }
  // (As local: the partitioned branches are done with.)
  Decision d = decide(shard, key, hash, known, now, limit.with_failure_policy(FailurePolicy::local),
                      cost, counted, defer);
  if (d.allowed && !d.would_reject && cost != 0) ledger_.note(hash, now, cost, window);
  return d;
}

Decision EngineCore::overflow(LimiterKey& key, std::uint64_t& hash, std::int64_t now,
                              const Limit& limit, std::uint64_t cost, Counted* counted,
                              std::optional<Admission>* defer) {
  // No room for a new limiter: the registry is full of limiters that still count, none
  // of which may go (that would hand its client a fresh quota). New keys share the
  // overflow limiter of their geometry until room frees up: together they get what one
  // key would.
  overflowed_.fetch_add(1, std::memory_order_relaxed);
  key.resource = kOverflowResource;
  hash = key.hash();
  return decide(registry_.shard_for(hash), key, hash, {}, now, limit, cost, counted, defer);
}

RecordRef EngineCore::insert(Shard& shard, const LimiterKey& key, std::uint64_t hash,
                             std::int64_t now, Shard::WriteSection& section) {
  // With a store, a limiter new to this engine starts at epoch 0, "never read", so that
  // it is cold (its use is still recorded at `now` for the LRU order).
  return shard.find_or_insert(key, hash, now, section, store_ != nullptr,
                              key.resource == kOverflowResource);
}

Decision EngineCore::try_acquire_at(std::uint64_t resource, const Limit& limit, std::uint64_t cost,
                                    std::int64_t now) {
  LimiterKey key = last_limit.key_of(resource, limit);
  std::uint64_t hash = key.hash();
  // (The lock-free read notes the caller: its key is the key of `resource` under `limit`.)
  return decide(registry_.shard_for(hash), key, hash, {}, now, limit, cost, nullptr, nullptr,
                &resource);
}

Decision EngineCore::try_acquire(Shard& shard, RecordRef ref, const Limit& limit,
                                 std::uint64_t cost) {
  const std::int64_t now = now_ns();
  LimiterKey key = LimiterKey::counted(ref.record->resource, limit);
  std::uint64_t hash = key.hash();
  return decide(shard, key, hash, ref, now, limit, cost);
}

// ---- AcquireAll (engine/acquire_all.h): here, with the decision paths it inlines.

AcquireAll::AcquireAll(EngineCore& engine, std::span<const Acquisition> items,
                       std::span<Decision> out)
    : engine_(engine),
      items_(items),
      out_(out),
      state_scratch_(items.size()),
      pending_scratch_(items.size()),
      state_(state_scratch_.span()),
      pending_(pending_scratch_.span()) {
  if (out.size() < items.size()) throw std::invalid_argument("try_acquire_all: out is too short");
}

std::optional<std::size_t> AcquireAll::begin() {
  const std::span<const Acquisition> items = items_;
  const std::span<Decision> out = out_;
  std::fill_n(out.begin(), items.size(), Decision{});
  Store* const store = engine_.store_.get();
  const std::int64_t now = engine_.now_ns();
  // A limit that refuses on this engine's own counts refuses the request before anything
  // is counted: the common rejection, decided without a lock or a round trip. Every limit
  // is read, so that the refusal reported is the one that lasts longest (a client told
  // to retry after the per-second limit would find the per-hour one still closed).
  std::size_t refused = items.size();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Acquisition& item = items[i];
    state_[i].key = LimiterKey::of(item.resource, item.limit);
    state_[i].hash = state_[i].key.hash();
    const bool degraded = store != nullptr && !store->available(item.resource);
    state_[i].degraded = degraded;
    if (degraded && item.limit.failure_policy() != FailurePolicy::local) continue;
    RecordRef ref;
    Decision d;
    const std::uint64_t version =
        engine_.read_without_lock(engine_.registry_.shard_for(state_[i].hash), state_[i].key,
                                  state_[i].hash, ref, now, item.limit, item.cost, d, nullptr);
    // (A limit in shadow never refuses the request: it is decided below, with the others.)
    if ((version & 1) == 0 && !d.allowed && item.limit.mode() != Mode::shadow) {
      d.degraded = degraded;
      out[i] = d;
      state_[i].refused = true;
      if (refused == items.size() || d.retry_after > out[refused].retry_after) refused = i;
    }
  }
  if (refused != items.size()) {
    // The others that refused keep their own refusals (only the one reported is counted
    // in the stats, as the request's); the rest are described as they stand, so that a
    // caller answering per limit (Envoy's RLS, per descriptor) can tell a limit within
    // its bounds from one over them, still without a write (or a lock, unless writers
    // keep interfering with the reads).
    describe_from(0, now);
    engine_.count(out[refused], items[refused].limit);
    return refused;
  }
  // Then each limit in turn, locally; the shared writes of those that count go out
  // together, in one round trip (to several Redis nodes in parallel), and each is
  // confirmed from its window. If one refuses after all (another thread, or the shared
  // counts), what the others counted is given back.
  for (std::size_t i = 0; i < items.size(); ++i) {
    Item& it = state_[i];
    out[i] = engine_.decide(engine_.registry_.shard_for(it.hash), it.key, it.hash, {}, now,
                            items[i].limit, items[i].cost, &it.counted, &pending_[i]);
    if (pending_[i]) {
      it.counted = pending_[i]->counted();
      out[i].allowed = true;  // so far: locally
      ++writes_;
      window_counts_ += it.key.counts_size();
      continue;
    }
    if (out[i].allowed) continue;
    // Refused locally: nothing of this group has been written to the store yet.
    for (std::size_t j = 0; j < i; ++j) {
      if (pending_[j]) {
        (void)pending_[j]->conclude();  // counted as decided; given back below
        pending_[j].reset();
      }
    }
    give_back_all_but(i, nullptr);
    // (The limits before i were decided, and what they counted given back.)
    describe_from(i + 1, now);
    return i;
  }
  if (writes_ == 0) return items.size();
  batch_ = batch_scratch_.emplace(writes_).span();
  counts_ = counts_scratch_.emplace(writes_).span();
  const std::span<std::uint64_t> windows = window_scratch_.emplace(window_counts_).span();
  // (Not Scratch<bool>: std::vector<bool> has no span.)
  if (writes_ > written_small_.size()) written_large_ = std::make_unique<bool[]>(writes_);
  written_ = std::span<bool>(
      writes_ > written_small_.size() ? written_large_.get() : written_small_.data(), writes_);
  std::size_t k = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!pending_[i]) continue;
    batch_[k] = pending_[i]->write();
    const std::size_t n = state_[i].key.counts_size();
    counts_[k] = windows.subspan(at, n);
    at += n;
    ++k;
  }
  return std::nullopt;
}

std::size_t AcquireAll::finish(AsyncWriter* async) {
  const std::span<Decision> out = out_;
  std::size_t refused_after = items_.size();
  std::size_t k = 0;
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (!pending_[i]) continue;
    out[i] = pending_[i]->finish(written_[k], counts_[k], async);
    state_[i].counted = pending_[i]->counted();
    pending_[i].reset();
    ++k;
    if (!out[i].allowed && refused_after == items_.size()) refused_after = i;
  }
  if (refused_after == items_.size()) return items_.size();
  give_back_all_but(refused_after, async);
  // (Another limit refused by the shared counts too gave its own cost back already.)
  return refused_after;
}

void AcquireAll::give_back_all_but(std::size_t refusing, AsyncWriter* async) {
  for (std::size_t j = 0; j < items_.size(); ++j) {
    if (j == refusing || !out_[j].allowed || out_[j].would_reject) continue;
    engine_.give_back(state_[j].key, state_[j].hash, items_[j].limit, items_[j].cost,
                      state_[j].counted, async);
    out_[j].remaining = std::min(out_[j].remaining + items_[j].cost, out_[j].limit);
  }
}

void AcquireAll::describe_from(std::size_t first, std::int64_t now) {
  for (std::size_t i = first; i < items_.size(); ++i) {
    const Item& it = state_[i];
    if (it.refused) continue;
    out_[i] = engine_.describe(it.key, it.hash, now, items_[i].limit, items_[i].cost, it.degraded);
  }
}

Decision EngineCore::describe(const LimiterKey& key, std::uint64_t hash, std::int64_t now,
                              const Limit& limit, std::uint64_t cost, bool degraded) {
  Decision d;
  if (degraded && limit.failure_policy() == FailurePolicy::closed) {
    // As decide_as: nothing can be vouched for without the store.
    d.limit = limit.burst();
    d.retry_after = std::max(store_->retry_hint(), std::chrono::nanoseconds(1));
  } else {
    Shard& shard = registry_.shard_for(hash);
    Decision asked;
    Decision idle;
    bool read = false;
    for (int attempt = 0; attempt < 3 && !read; ++attempt)
      read = read_uncounted(shard, key, hash, now, limit, cost, false, asked, idle);
    if (!read) {
      std::lock_guard lock(shard.mutex);
      read_uncounted(shard, key, hash, now, limit, cost, true, asked, idle);
    }
    // A limit that would admit the request tells what it holds now, nothing of this
    // request counted: its remaining before it, and when its window empties of the counts
    // it has (an admission's reset_after would count this request's own). One that would
    // refuse tells its refusal, as try_acquire would.
    d = asked.allowed ? idle : asked;
    d.allowed = asked.allowed;
    if (!d.allowed && degraded && limit.failure_policy() == FailurePolicy::open) {
      d.allowed = true;  // the open policy: whatever the counts say
      d.retry_after = std::chrono::nanoseconds(0);
    }
  }
  d.degraded = degraded;
  if (!d.allowed && limit.mode() == Mode::shadow) {
    d.allowed = true;
    d.would_reject = true;
  }
  return d;
}

bool EngineCore::read_uncounted(Shard& shard, const LimiterKey& key, std::uint64_t hash,
                                std::int64_t now, const Limit& limit, std::uint64_t cost,
                                bool locked, Decision& asked, Decision& idle) {
  const std::uint64_t before = locked ? 0 : shard.read_begin();
  if ((before & 1) != 0) return false;
  const auto valid = [&] { return locked || shard.read_valid(before); };
  const RecordRef ref = locked ? shard.find(key, hash) : shard.find_racy(key, hash);
  if (!ref) {
    if (!valid()) return false;
    // No counts here: the whole limit is left.
    idle = Decision{};
    idle.allowed = true;
    idle.limit = limit.burst();
    idle.remaining = idle.limit;
    asked = idle;
    if (cost > asked.limit) {
      asked.allowed = false;
      asked.retry_after = Decision::kNever;
    }
    return true;
  }
  if (key.bucket()) {
    const TokenBucket bucket(ref.record->window);
    bucket.evaluate(now, BucketRule::of(limit), cost, asked);
    bucket.evaluate(now, BucketRule::of(limit), 0, idle);
    return valid();
  }
  if (key.log()) {
    const SlidingLog log = ref.record->log(key);
    log.evaluate(now, LogRule::of(limit), cost, asked);
    log.evaluate(now, LogRule::of(limit), 0, idle);
    return valid();
  }
  // A ring decides only at its current subinterval, and moving the limiter there would be
  // a write (and end other threads' lock-free reads): a copy of it moves instead, once the
  // copy is known to be consistent.
  WindowState state = ref.record->window;
  Scratch<Bucket, 64> buckets(key.subintervals);
  std::copy_n(ref.record->buckets(), key.subintervals, buckets.span().begin());
  if (!valid()) return false;
  SlidingWindow window(state, buckets.span().data(), key.subintervals, key.resolution_ns());
  window.advance(now);
  const Trailing trailing = trailing_of(limit.algorithm());
  window.evaluate(now, limit.max(), cost, trailing, asked);  // cannot fail: at now's epoch
  window.evaluate(now, limit.max(), 0, trailing, idle);
  return true;
}

std::size_t EngineCore::try_acquire_all(std::span<const Acquisition> items,
                                        std::span<Decision> out) {
  AcquireAll call(*this, items, out);
  if (const std::optional<std::size_t> decided = call.begin()) return *decided;
  store_->add_all(call.writes(), call.counts(), call.written());
  return call.finish();
}

void EngineCore::give_back(const LimiterKey& key, std::uint64_t hash, const Limit& limit,
                           std::uint64_t cost, const Counted& counted, AsyncWriter* async) {
  if (counted.pending) return batcher_->give_back(key, hash, limit, cost, counted.epoch, async);
  // The store first: a merge racing with this (another thread's write returning the
  // shared counts) then cannot bring the local count back from a stale shared one.
  if (counted.store) {
    // (A bucket gives back from its TAT as of now.)
    remove(store_write(key, counted.epoch, now_ns(), cost, false, limit), async);
  }
  if (counted.local) {
    Shard& shard = registry_.shard_for(hash);
    std::lock_guard lock(shard.mutex);
    if (const RecordRef found = shard.find(key, hash)) {
      Shard::WriteSection section(shard);
      found.record->take_back(counted.epoch, now_ns(), cost, BucketRule::of(limit));
    }
  }
}

std::size_t EngineCore::try_acquire_all_async(std::span<const Acquisition> items,
                                              std::span<Decision> out, Engine::AsyncDone done) {
  if (store_ == nullptr) return try_acquire_all(items, out);
  if (out.size() < items.size()) throw std::invalid_argument("try_acquire_all: out is too short");
  // One call whose writes are in flight: it owns what its admissions refer to, and does
  // not move.
  struct Call {
    std::vector<Acquisition> items;
    std::vector<Decision> decisions;
    std::optional<AcquireAll> all;
    Engine::AsyncDone done;
  };
  auto call = std::make_shared<Call>();
  call->items.assign(items.begin(), items.end());
  call->decisions.assign(items.size(), Decision{});
  call->all.emplace(*this, call->items, call->decisions);
  if (const std::optional<std::size_t> decided = call->all->begin()) {
    std::copy(call->decisions.begin(), call->decisions.end(), out.begin());
    return *decided;
  }
  call->done = std::move(done);
  AcquireAll& all = *call->all;
  store_->write_async(all.writes(), all.counts(), all.written(), [call](AsyncWriter& writer) {
    const std::size_t refused = call->all->finish(&writer);
    call->done(refused, call->decisions);
  });
  return Engine::kPending;
}

bool EngineCore::reset(std::uint64_t resource, const Limit& limit) {
  const LimiterKey key = LimiterKey::of(resource, limit);
  const std::uint64_t hash = key.hash();
  // The store first, as give_back() does.
  const bool shared = store_ == nullptr || store_->reset(key);
  Shard& shard = registry_.shard_for(hash);
  std::lock_guard lock(shard.mutex);
  if (const RecordRef found = shard.find(key, hash)) {
    Shard::WriteSection section(shard);
    found.record->clear(now_ns());
    if (batcher_ != nullptr && key.ring()) batcher_->reset(shard, *found.record, key);
  }
  return shared;
}

std::uint64_t EngineCore::refund(std::uint64_t resource, const Limit& limit, std::uint64_t cost) {
  const LimiterKey key = LimiterKey::of(resource, limit);
  const std::uint64_t hash = key.hash();
  Shard& shard = registry_.shard_for(hash);
  if (key.bucket()) return refund_bucket(shard, key, hash, limit, cost);
  const std::int64_t now = now_ns();
  // What to take back, newest first: a ring's by subinterval, from the counts this engine
  // holds (its own and the shared ones it has seen; the trailing subinterval, on its way
  // out, is left alone); a log's by expiry, from its own entries (a log knows no others).
  std::vector<EpochCount> taken;
  std::uint64_t total = 0;
  std::uint64_t unwritten = 0;  // batched: of taken's newest, what was still pending
  {
    std::lock_guard lock(shard.mutex);
    const RecordRef found = shard.find(key, hash);
    if (!found) return 0;
    if (key.log()) {
      const SlidingLog log = found.record->log();
      std::int64_t before = std::numeric_limits<std::int64_t>::max();
      std::int64_t expiry = 0;
      std::uint64_t count = 0;
      while (total < cost && log.newest_before(now, before, expiry, count)) {
        const std::uint64_t take = std::min(count, cost - total);
        taken.push_back({expiry, take});
        total += take;
        before = expiry;
      }
    } else {
      const SlidingWindow window = found.record->view();
      const std::int64_t newest = window.epoch();
      for (std::int64_t e = newest; e > newest - std::int64_t{key.subintervals} && total < cost;
           --e) {
        const std::uint64_t take =
            std::min<std::uint64_t>(window.count_for_epoch(e), cost - total);
        if (take == 0) continue;
        taken.push_back({e, take});
        total += take;
      }
      // What this engine admitted and has not written is taken from its pending counts.
      if (batcher_ != nullptr && !taken.empty())
        unwritten = batcher_->take_pending(shard, *found.record, key, taken.front().epoch,
                                           taken.front().count);
    }
  }
  // The store first, as give_back() does.
  if (store_ != nullptr) {
    for (std::size_t i = 0; i < taken.size(); ++i) {
      const std::uint64_t written = taken[i].count - (i == 0 ? unwritten : 0);
      if (written != 0) store_->remove(store_write(key, taken[i].epoch, now, written, false, limit));
    }
  }
  std::lock_guard lock(shard.mutex);
  if (const RecordRef found = shard.find(key, hash)) {
    Shard::WriteSection section(shard);
    for (const EpochCount& t : taken)
      found.record->take_back(t.epoch, now, t.count, BucketRule::of(limit));
    if (batcher_ != nullptr && key.ring()) Batcher::add_budget(*found.record, key, total);
  }
  return total;
}

std::uint64_t EngineCore::refund_bucket(Shard& shard, const LimiterKey& key, std::uint64_t hash,
                                        const Limit& limit, std::uint64_t cost) {
  const BucketRule rule = BucketRule::of(limit);
  const std::int64_t now = now_ns();
  // What the bucket holds of what was counted (its backlog, in units, rounded up): the
  // store is told before the local TAT moves, as give_back() does.
  std::uint64_t taken = 0;
  {
    std::lock_guard lock(shard.mutex);
    const RecordRef found = shard.find(key, hash);
    if (!found) return 0;
    taken = found.record->bucket().held(now, cost, rule);
  }
  if (taken == 0) return 0;
  if (store_ != nullptr) store_->remove(store_write(key, now, now, taken, false, limit));
  std::lock_guard lock(shard.mutex);
  if (const RecordRef found = shard.find(key, hash)) {
    Shard::WriteSection section(shard);
    found.record->bucket().remove(now, taken, rule);
  }
  return taken;
}

void EngineCore::take_activity(std::vector<Activity>& out) {
  for (std::size_t i = 0; i < registry_.shard_count(); ++i) {
    Shard& shard = registry_.shard(i);
    std::lock_guard lock(shard.mutex);
    out.insert(out.end(), shard.activity.begin(), shard.activity.end());
    shard.activity.clear();
  }
}

void EngineCore::merge(std::span<const SharedCounts> windows) {
  // A boundary read merges thousands of limiters spread over the whole registry: most
  // lookups miss the cache twice (the table slot, then the record). Hinting each one's
  // slot, then its record, a few lookups ahead lets those misses overlap.
  constexpr std::size_t kAhead = 8;
  Scratch<std::uint64_t, 128> scratch(windows.size());
  const std::span<std::uint64_t> hashes = scratch.span();
  for (std::size_t i = 0; i < windows.size(); ++i) hashes[i] = windows[i].key.hash();
  for (std::size_t i = 0; i < std::min(windows.size(), 2 * kAhead); ++i)
    registry_.shard_for(hashes[i]).prefetch(windows[i].key, hashes[i], i >= kAhead);
  for (std::size_t i = 0; i < windows.size(); ++i) {
    if (i + 2 * kAhead < windows.size()) {
      const std::size_t j = i + 2 * kAhead;
      registry_.shard_for(hashes[j]).prefetch(windows[j].key, hashes[j], false);
    }
    if (i + kAhead < windows.size()) {
      const std::size_t j = i + kAhead;
      registry_.shard_for(hashes[j]).prefetch(windows[j].key, hashes[j], true);
    }
    Shard& shard = registry_.shard_for(hashes[i]);
    std::lock_guard lock(shard.mutex);
    const RecordRef found = shard.find(windows[i].key, hashes[i]);
    if (!found || !found.record->is_ring()) continue;  // (only rings are read at boundaries)
    Shard::WriteSection section(shard);
    SlidingWindow window = found.record->view();
    // (Batched: what was admitted here and not yet written is not in the shared counts.)
    const Batcher::Pending pending = batcher_ != nullptr
                                         ? batcher_->pending(shard, *found.record, windows[i].key)
                                         : Batcher::Pending{};
    for (const EpochCount& c : windows[i].counts)
      window.merge(c.epoch, c.count + pending.at(c.epoch));
  }
}

std::pair<Shard*, RecordRef> EngineCore::pin(std::uint64_t resource, const Limit& limit) {
  const LimiterKey key = LimiterKey::of(resource, limit);
  const std::uint64_t hash = key.hash();
  Shard& shard = registry_.shard_for(hash);
  std::lock_guard lock(shard.mutex);
  Shard::WriteSection section(shard, Shard::WriteSection::Deferred{});
  // A handle's limiter is made even over the bounds (the application holds it).
  const RecordRef ref = shard.find_or_insert(key, hash, now_ns(), section, store_ != nullptr, true);
  shard.pin(ref);
  return {&shard, ref};
}

void EngineCore::unpin(Shard& shard, RecordRef ref) noexcept {
  std::lock_guard lock(shard.mutex);
  shard.unpin(ref);
}

Stats EngineCore::stats() const {
  Stats s;
  s.max_limiters = registry_.max_limiters();
  s.max_memory = registry_.max_bytes();
  s.overflowed = overflowed_.load(std::memory_order_relaxed);
  s.allowed = counters_.total(DecisionCounters::kAllowed);
  s.rejected = counters_.total(DecisionCounters::kRejected);
  s.degraded = counters_.total(DecisionCounters::kDegraded);
  s.would_reject = counters_.total(DecisionCounters::kWouldReject);
  for (std::size_t i = 0; i < registry_.shard_count(); ++i) {
    Shard& shard = registry_.shard(i);
    std::lock_guard lock(shard.mutex);
    s.limiters += shard.size();
    s.pinned += shard.pinned;
    s.evictions += shard.evictions;
    s.evictions_active += shard.evictions_active;
    s.memory += shard.bytes();
  }
  if (store_ != nullptr) {
    store_->add_stats(s);
    s.warm_starts = warm_starts_.load(std::memory_order_relaxed);
    if (batcher_ != nullptr) batcher_->add_stats(s);
    s.warm_start_failures = warm_start_failures_.load(std::memory_order_relaxed);
  }
  return s;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
