#include "ratewin/engine.h"

#include <atomic>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "engine_core.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

std::atomic<std::uint64_t> next_engine_id{1};

// This thread's last lock-free read. While the shard's version is the one seen then,
// nothing in the shard has changed: the record found is still the key's, and if that
// read rejected a request of cost 1, the same request keeps being rejected, with the
// same absolute retry and reset times, until its retry time. The cached answer is used
// only until the end of the record's epoch, so that a call in a later epoch still moves
// the window forward (exactly as SlidingWindow::try_acquire does).
struct LastRead {
  std::uint64_t engine = 0;
  std::uint64_t version = 0;
  LimiterKey key;
  RecordRef ref;
  std::uint64_t max = 0;
  std::int64_t rejects_until = std::numeric_limits<std::int64_t>::min();  // min(retry, epoch end)
  std::int64_t retry_at = 0;
  std::int64_t reset_at = 0;
};
thread_local LastRead last_read;

}  // namespace

EngineCore::EngineCore(Options options, std::unique_ptr<Store> store)
    : id_(next_engine_id.fetch_add(1, std::memory_order_relaxed)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : system_clock()),
      system_clock_(dynamic_cast<const SystemClock*>(clock_.get()) != nullptr),
      store_(std::move(store)),
      registry_(options_.max_limiters) {}

[[gnu::always_inline]] inline std::uint64_t EngineCore::read_without_lock(
    Shard& shard, const LimiterKey& key, std::uint64_t hash, RecordRef& ref, std::int64_t now,
    const Limit& limit, std::uint64_t cost, Decision& out) noexcept {
  const std::uint64_t before = shard.read_begin();
  if ((before & 1) != 0) return 1;
  LastRead& last = last_read;
  const bool unchanged = last.engine == id_ && last.version == before && last.key == key;
  if (unchanged && cost == 1 && now < last.rejects_until && last.max == limit.max()) {
    out.allowed = false;
    out.degraded = false;
    out.limit = last.max;
    out.remaining = 0;
    out.reset_after = std::chrono::nanoseconds(last.reset_at - now);
    out.retry_after = std::chrono::nanoseconds(last.retry_at - now);
    return before;
  }
  if (!ref) {
    ref = unchanged ? last.ref : shard.find_racy(key, hash);
    if (!ref) return 1;
  }
  const SlidingWindow window = ref.record->view(key);
  if (!window.evaluate(now, limit.max(), cost, out)) return 1;
  const std::int64_t epoch = window.epoch();
  if (!shard.read_valid(before)) return 1;
  // Validated: the values are consistent, the arithmetic below cannot overflow.
  const std::int64_t epoch_end = (epoch + 1) * key.resolution_ns();
  const std::int64_t retry_at = out.retry_after == Decision::kNever
                                    ? std::numeric_limits<std::int64_t>::max()
                                    : now + out.retry_after.count();
  last = {id_,
          before,
          key,
          ref,
          limit.max(),
          (!out.allowed && cost == 1) ? std::min(retry_at, epoch_end)
                                      : std::numeric_limits<std::int64_t>::min(),
          retry_at,
          now + out.reset_after.count()};
  return before;
}

[[gnu::always_inline]] inline Decision EngineCore::decide(Shard& shard, const LimiterKey& key,
                                                          std::uint64_t hash, RecordRef known,
                                                          std::int64_t now, const Limit& limit,
                                                          std::uint64_t cost) {
  Decision d;
  RecordRef ref = known;
  const std::uint64_t version = read_without_lock(shard, key, hash, ref, now, limit, cost, d);
  if ((version & 1) == 0 && !d.allowed) {
    // A rejection changes nothing: it is decided from local state, without the lock.
    counters_.add(DecisionCounters::kRejected);
    return d;
  }
  return decide_locked(shard, key, hash, known, ref, version, d, now, limit, cost);
}

[[gnu::noinline]] Decision EngineCore::decide_locked(Shard& shard, const LimiterKey& key,
                                                     std::uint64_t hash, RecordRef known,
                                                     RecordRef ref, std::uint64_t version,
                                                     Decision d, std::int64_t now,
                                                     const Limit& limit, std::uint64_t cost) {
  std::int64_t epoch = 0;
  {
    std::lock_guard lock(shard.mutex);
    Shard::WriteSection section(shard, Shard::WriteSection::Deferred{});
    // If no writer came in between, the lock-free read still holds: count its decision.
    const bool unchanged =
        (version & 1) == 0 && shard.version.load(std::memory_order_relaxed) == version;
    Record& record = unchanged ? *ref.record
                     : known   ? *known.record
                               : *shard.find_or_insert(key, hash, now, section).record;
    SlidingWindow window = record.view();
    if (!unchanged) {
      if (!window.current_at(now)) {
        section.open();
        window.advance(now);
      }
      window.evaluate(now, limit.max(), cost, d);  // cannot fail: at now's epoch or later
    }
    if (d.allowed && cost != 0) {
      section.open();
      window.add(cost);
    }
    epoch = window.epoch();
  }
  counters_.add(d.allowed ? DecisionCounters::kAllowed : DecisionCounters::kRejected);
  if (store_ != nullptr && d.allowed && cost != 0) {
    publish(shard, key, hash, epoch, now, limit, cost, d);
  }
  return d;
}

Decision EngineCore::try_acquire(std::uint64_t resource, const Limit& limit, std::uint64_t cost) {
  const std::int64_t now = now_ns();
  const LimiterKey key = LimiterKey::of(resource, limit);
  const std::uint64_t hash = key.hash();
  return decide(registry_.shard_for(hash), key, hash, {}, now, limit, cost);
}

Decision EngineCore::try_acquire(Shard& shard, RecordRef ref, const Limit& limit,
                                 std::uint64_t cost) {
  const std::int64_t now = now_ns();
  const LimiterKey key = LimiterKey::of(ref.record->resource, limit);
  return decide(shard, key, key.hash(), ref, now, limit, cost);
}

void EngineCore::publish(Shard& shard, const LimiterKey& key, std::uint64_t hash,
                         std::int64_t epoch, std::int64_t now, const Limit& limit,
                         std::uint64_t cost, Decision& decision) {
  const std::optional<std::uint64_t> shared = store_->add(key, epoch, cost);
  if (!shared) {
    decision.degraded = true;
    counters_.add(DecisionCounters::kDegraded);
    return;
  }
  std::lock_guard lock(shard.mutex);
  Shard::WriteSection section(shard);
  // The limiter may have been evicted while the lock was released; then the count
  // lives on in the store and is loaded again when the resource comes back.
  if (RecordRef found = shard.find(key, hash)) {
    SlidingWindow window = found.record->view();
    window.merge(epoch, *shared);
    // A zero-cost probe reads the merged state without counting anything.
    const Decision merged = window.try_acquire(now, limit.max(), 0);
    decision.remaining = merged.remaining;
    decision.reset_after = merged.reset_after;
  }
}

std::pair<Shard*, RecordRef> EngineCore::pin(std::uint64_t resource, const Limit& limit) {
  const LimiterKey key = LimiterKey::of(resource, limit);
  const std::uint64_t hash = key.hash();
  Shard& shard = registry_.shard_for(hash);
  std::lock_guard lock(shard.mutex);
  Shard::WriteSection section(shard, Shard::WriteSection::Deferred{});
  const RecordRef ref = shard.find_or_insert(key, hash, now_ns(), section);
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
  s.allowed = counters_.total(DecisionCounters::kAllowed);
  s.rejected = counters_.total(DecisionCounters::kRejected);
  s.degraded = counters_.total(DecisionCounters::kDegraded);
  for (std::size_t i = 0; i < registry_.shard_count(); ++i) {
    Shard& shard = registry_.shard(i);
    std::lock_guard lock(shard.mutex);
    s.limiters += shard.size();
    s.pinned += shard.pinned;
    s.evictions += shard.evictions;
    s.evictions_active += shard.evictions_active;
  }
  return s;
}

}  // namespace detail

Engine::Engine(Options options)
    : core_(std::make_shared<detail::EngineCore>(std::move(options), nullptr)) {}

Engine::~Engine() = default;

Decision Engine::try_acquire(std::uint64_t resource, const Limit& limit, std::uint64_t cost) {
  return core_->try_acquire(resource, limit, cost);
}

LimiterHandle Engine::limiter(std::uint64_t resource, const Limit& limit) {
  auto [shard, ref] = core_->pin(resource, limit);
  return LimiterHandle(core_, shard, ref.record, ref.id, resource, limit);
}

LimiterHandle Engine::limiter(std::string_view resource, const Limit& limit) {
  return limiter(hash(resource), limit);
}

Stats Engine::stats() const { return core_->stats(); }

const Options& Engine::options() const noexcept { return core_->options(); }

LimiterHandle::LimiterHandle(std::shared_ptr<detail::EngineCore> core, detail::Shard* shard,
                             detail::Record* record, std::uint32_t record_id,
                             std::uint64_t resource, const Limit& limit)
    : core_(std::move(core)),
      shard_(shard),
      record_(record),
      record_id_(record_id),
      resource_(resource),
      limit_(limit) {}

LimiterHandle::LimiterHandle(LimiterHandle&& other) noexcept
    : core_(std::move(other.core_)),
      shard_(std::exchange(other.shard_, nullptr)),
      record_(std::exchange(other.record_, nullptr)),
      record_id_(other.record_id_),
      resource_(other.resource_),
      limit_(other.limit_) {}

LimiterHandle& LimiterHandle::operator=(LimiterHandle&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    shard_ = std::exchange(other.shard_, nullptr);
    record_ = std::exchange(other.record_, nullptr);
    record_id_ = other.record_id_;
    resource_ = other.resource_;
    limit_ = other.limit_;
  }
  return *this;
}

LimiterHandle::~LimiterHandle() { release(); }

void LimiterHandle::release() noexcept {
  if (record_ != nullptr) detail::EngineCore::unpin(*shard_, {record_id_, record_});
  core_.reset();
  shard_ = nullptr;
  record_ = nullptr;
}

Decision LimiterHandle::try_acquire(std::uint64_t cost) {
  if (record_ == nullptr) throw std::logic_error("ratewin: LimiterHandle was moved from");
  return core_->try_acquire(*shard_, {record_id_, record_}, limit_, cost);
}

}  // namespace v1
}  // namespace ratewin
