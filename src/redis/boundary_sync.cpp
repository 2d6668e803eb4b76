#include "redis/boundary_sync.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <unordered_set>

#include "core/window.h"
#include "redis/async.h"

namespace ratewin::inline v1::detail {
namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A command in RESP, as hiredis sends it.
std::string resp(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string_view a : args) {
    out += '$';
    out += std::to_string(a.size());
    out += "\r\n";
    out += a;
    out += "\r\n";
  }
  return out;
}

}  // namespace

struct BoundarySync::Geometry {
  std::uint32_t resolution_ms = 0;
  std::uint32_t subintervals = 0;
  std::int64_t next_boundary = 0;                          // epoch whose start is the next boundary
  std::set<std::int64_t> unread;                           // closed epochs not read yet
  std::unordered_map<std::uint64_t, std::int64_t> active;  // resource -> last epoch used here
  bool reading = false;
  bool resync = false;  // read whole windows at the next chance (after an outage)
  std::int64_t resolution_ns() const noexcept { return std::int64_t{resolution_ms} * 1'000'000; }
};

// One boundary read of one geometry, in flight on the background connection. It owns
// itself: the last reply (or failure) of its last phase finishes it.
struct BoundarySync::Batch {
  struct Slot {
    Batch* batch;
    std::size_t index;
  };
  BoundarySync* sync = nullptr;
  Geometry* geometry = nullptr;
  std::int64_t epoch_now = 0;               // decode windows as of this epoch
  std::vector<std::int64_t> epochs;         // the closed epochs this read covers
  bool reading_windows = false;             // phase 2 (phase 1: the change sets)
  std::vector<std::uint64_t> resources;     // phase 2: the windows to read
  std::unordered_set<std::uint64_t> named;  // phase 1: active resources others wrote
  std::vector<Slot> slots;
  std::vector<std::uint64_t> counts;  // decoding scratch
  std::vector<EpochCount> merged;     // merging scratch
  std::size_t remaining = 0;
  std::size_t change_sets = 0;
  std::size_t key_errors = 0;
  bool ok = true;
  std::int64_t started_ns = 0;
  std::function<void(bool)> done;

  void take(std::size_t index, const redisReply* r);
  // Queues phase 1 (every change set of `epochs` in the shards with active limiters).
  void send_change_sets(bool flush);
  // Queues phase 2: the windows of `resources`.
  void send_windows(bool flush);
  void finish();
  // Sends `command` for slot `index`; false (and the batch failed) if not connected.
  bool send(std::string_view command, std::size_t index);
};

BoundarySync::BoundarySync(const Options& options, const StoreLayout& layout,
                           const ClockSync& clock, SyncTarget& target, Reporter& reporter)
    : options_(options), layout_(layout), clock_(clock), target_(target), reporter_(reporter) {}

BoundarySync::~BoundarySync() = default;

std::int64_t BoundarySync::settle_ns(const Geometry& g) const noexcept {
  return std::min<std::int64_t>(options_.sync_settle.count() * 1'000'000, g.resolution_ns() / 4);
}

void BoundarySync::absorb_activity(std::int64_t now) {
  activity_.clear();
  target_.take_activity(activity_);
  for (const Activity& a : activity_) {
    Geometry& g = geometries_[{a.key.resolution_ms, a.key.subintervals}];
    if (g.resolution_ms == 0) {  // a geometry seen for the first time
      g.resolution_ms = a.key.resolution_ms;
      g.subintervals = a.key.subintervals;
      g.next_boundary = SlidingWindow::epoch_of(now, g.resolution_ns()) + 1;
    }
    std::int64_t& last = g.active[a.key.resource];
    last = std::max(last, a.epoch);
  }
}

void BoundarySync::tick(bool available) {
  const std::int64_t now = clock_.now();
  absorb_activity(now);
  std::uint64_t active = 0;
  for (auto& entry : geometries_) {
    Geometry& g = entry.second;
    const std::int64_t r = g.resolution_ns();
    const std::int64_t n = g.subintervals;
    const std::int64_t e = SlidingWindow::epoch_of(now, r);
    if (now >= g.next_boundary * r + settle_ns(g)) {
      // The epochs that closed since the last boundary handled (several if this tick is
      // late), no older than the window.
      for (std::int64_t x = std::max(g.next_boundary - 1, e - n); x < e; ++x) g.unread.insert(x);
      g.next_boundary = e + 1;
      // Limiters not used here for a whole window stop being read: if one is used
      // again, its window is loaded afresh (a warm start).
      std::erase_if(g.active, [&](const auto& use) { return use.second < e - n - 1; });
    }
    std::erase_if(g.unread, [&](std::int64_t x) { return x < e - n; });
    active += g.active.size();
    if (g.reading || g.active.empty() || !available || (g.unread.empty() && !g.resync)) continue;
    std::vector<std::int64_t> epochs(g.unread.begin(), g.unread.end());
    // Change sets expire with epoch + 3: a read that would come after that reads every
    // window instead.
    const bool late = !epochs.empty() && now + r / 4 >= StoreLayout::change_set_expiry_ms(
                                                            g.resolution_ms, epochs.front()) *
                                                            1'000'000;
    const bool whole = g.resync || late;
    read(g, epochs, whole, [&g, epochs, whole](bool ok) {
      if (!ok) return;
      if (whole) g.resync = false;
      for (const std::int64_t x : epochs) g.unread.erase(x);
    });
  }
  active_.store(active, std::memory_order_relaxed);
}

std::int64_t BoundarySync::next_due(std::int64_t now, std::int64_t cap) const {
  std::int64_t delay = cap;
  for (const auto& [id, g] : geometries_) {
    delay = std::min(delay, g.next_boundary * g.resolution_ns() + settle_ns(g) - now);
  }
  return std::max<std::int64_t>(0, delay);
}

void BoundarySync::resync_all() {
  for (auto& [id, g] : geometries_) g.resync = true;
}

void BoundarySync::read_all(std::function<void(bool)> done) {
  // Take in recent activity as a tick does, without moving its boundaries.
  absorb_activity(clock_.now());
  auto pending = std::make_shared<std::size_t>(geometries_.size() + 1);
  auto all_ok = std::make_shared<bool>(connection_ != nullptr && connection_->ready());
  auto one_done = [done = std::move(done), pending, all_ok](bool ok) {
    *all_ok = *all_ok && ok;
    if (--*pending == 0) done(*all_ok);
  };
  for (auto& [id, g] : geometries_) read(g, {}, true, one_done);
  one_done(true);
}

void BoundarySync::read(Geometry& g, std::vector<std::int64_t> epochs, bool whole,
                        std::function<void(bool)> done) {
  if (g.active.empty()) {
    done(true);
    return;
  }
  if (connection_ == nullptr || !connection_->ready()) {
    done(false);
    return;
  }
  auto* batch = new Batch;
  batch->sync = this;
  batch->geometry = &g;
  batch->epoch_now = SlidingWindow::epoch_of(clock_.now(), g.resolution_ns());
  batch->epochs = std::move(epochs);
  batch->started_ns = steady_ns();
  batch->done = std::move(done);
  g.reading = true;
  if (whole) {
    batch->resources.reserve(g.active.size());
    for (const auto& [resource, last] : g.active) batch->resources.push_back(resource);
    batch->send_windows(true);
  } else {
    batch->send_change_sets(true);
  }
}

bool BoundarySync::Batch::send(std::string_view command, std::size_t index) {
  slots[index] = {this, index};
  if (sync->connection_->command_formatted(command, &slots[index])) return true;
  // Not connected any more: this and the rest fail at once.
  ok = false;
  return false;
}

void BoundarySync::Batch::send_change_sets(bool flush) {
  std::uint64_t shards = 0;  // a bit per change-set shard with an active limiter
  for (const auto& [resource, last] : geometry->active)
    shards |= std::uint64_t{1} << StoreLayout::change_set_shard(resource);
  std::vector<std::string> commands;
  for (const std::int64_t x : epochs) {
    for (unsigned shard = 0; shard < StoreLayout::kChangeSetShards; ++shard) {
      if ((shards >> shard & 1) == 0) continue;
      commands.push_back(
          resp({"GET", sync->layout_.change_set_key(geometry->resolution_ms, geometry->subintervals,
                                                    shard, x)}));
    }
  }
  change_sets = commands.size();
  slots.resize(commands.size());
  remaining = commands.size();
  if (remaining == 0) {
    finish();
    return;
  }
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (!send(commands[i], i)) {
      remaining -= commands.size() - i;
      if (remaining == 0) finish();
      return;
    }
  }
  if (flush) sync->connection_->flush();
}

void BoundarySync::Batch::send_windows(bool flush) {
  reading_windows = true;
  slots.clear();
  slots.resize(resources.size());
  remaining = resources.size();
  if (remaining == 0) {
    finish();
    return;
  }
  // Every command differs only in the resource's 16 hex digits: format one and patch it.
  const LimiterKey probe{0, geometry->resolution_ms, geometry->subintervals};
  const std::string key = sync->layout_.window_key(probe);
  std::string command = resp({"GET", key});
  const std::size_t hex_at = command.size() - 2 - key.size() + sync->layout_.prefix().size() + 2;
  constexpr char kDigits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < resources.size(); ++i) {
    std::uint64_t v = resources[i];
    for (int d = 15; d >= 0; --d, v >>= 4)
      command[hex_at + static_cast<std::size_t>(d)] = kDigits[v & 15];
    if (flush && i % 16384 == 16383) sync->connection_->flush();  // let Redis start early
    if (!send(command, i)) {
      remaining -= resources.size() - i;
      if (remaining == 0) finish();
      return;
    }
  }
  if (flush) sync->connection_->flush();
}

void BoundarySync::on_reply(const redisReply* r, void* context) {
  const auto& slot = *static_cast<const Batch::Slot*>(context);
  slot.batch->take(slot.index, r);
}

void BoundarySync::Batch::take(std::size_t index, const redisReply* r) {
  if (r == nullptr) {
    ok = false;  // the connection failed: the epochs are read again next time
  } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL) {
    const std::string_view value =
        r->type == REDIS_REPLY_STRING ? std::string_view(r->str, r->len) : std::string_view();
    if (!reading_windows) {
      sync->layout_.others_in_change_set(value, [&](std::uint64_t resource) {
        if (geometry->active.contains(resource)) named.insert(resource);
      });
    } else {
      const std::uint32_t n = geometry->subintervals;
      counts.resize(std::size_t{n} + 1);
      StoreLayout::decode(value, epoch_now, n, counts);
      merged.clear();
      for (std::size_t k = 0; k < counts.size(); ++k) {
        if (counts[k] != 0) merged.push_back({epoch_now - static_cast<std::int64_t>(k), counts[k]});
      }
      if (!merged.empty()) {
        sync->target_.merge({resources[index], geometry->resolution_ms, n}, merged);
      }
    }
  } else {
    // This key alone could not be read (say, WRONGTYPE: something else wrote it): the
    // rest of the batch stands.
    ++key_errors;
  }
  if (--remaining > 0) return;
  if (!reading_windows && ok) {
    resources.assign(named.begin(), named.end());
    named.clear();
    send_windows(false);  // inside hiredis' callback: it writes them on the next turn
    return;
  }
  finish();
}

void BoundarySync::Batch::finish() {
  const std::int64_t took = steady_ns() - started_ns;
  (ok ? sync->rounds_ : sync->failures_).fetch_add(1, std::memory_order_relaxed);
  sync->last_keys_.store(reading_windows ? resources.size() : 0, std::memory_order_relaxed);
  sync->last_change_sets_.store(change_sets, std::memory_order_relaxed);
  sync->last_ns_.store(took, std::memory_order_relaxed);
  if (took > sync->max_ns_.load(std::memory_order_relaxed)) {
    sync->max_ns_.store(took, std::memory_order_relaxed);
  }
  if (key_errors > 0) {
    sync->reporter_.note_error("boundary read: " + std::to_string(key_errors) +
                               " keys could not be read (written by something else?)");
  }
  geometry->reading = false;
  done(ok);
  delete this;
}

void BoundarySync::add_stats(Stats& s) const {
  s.sync_rounds = rounds_.load(std::memory_order_relaxed);
  s.sync_failures = failures_.load(std::memory_order_relaxed);
  s.sync_last_keys = last_keys_.load(std::memory_order_relaxed);
  s.sync_last_change_sets = last_change_sets_.load(std::memory_order_relaxed);
  s.sync_last_duration = std::chrono::nanoseconds(last_ns_.load(std::memory_order_relaxed));
  s.sync_max_duration = std::chrono::nanoseconds(max_ns_.load(std::memory_order_relaxed));
  s.active_limiters = active_.load(std::memory_order_relaxed);
}

}  // namespace ratewin::inline v1::detail
