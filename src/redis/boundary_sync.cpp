#include "redis/boundary_sync.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <deque>

#include "core/window.h"
#include "redis/async.h"
#include "redis/slot.h"
#include "redis/steady_ns.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// A reply saying that the key's slot is served elsewhere, or is moving: MOVED, ASK,
// TRYAGAIN, or a cluster that is down (its map is being changed).
bool redirected(const redisReply& r) {
  const Status status = status_of(r);
  return status.code() == Status::Code::redirect || status.code() == Status::Code::retry ||
         std::string_view(r.str, r.len).starts_with("CLUSTERDOWN");
}

}  // namespace

struct BoundarySync::Geometry {
  std::uint32_t resolution_ms = 0;
  std::uint32_t subintervals = 0;
  std::int64_t next_boundary = 0;                          // epoch whose start is the next boundary
  std::set<std::int64_t> unread;                           // closed epochs not read yet
  std::unordered_map<std::uint64_t, std::int64_t> active;  // resource -> last epoch used here
  int reading = 0;      // reads in flight (read_all may start one beside a tick's)
  bool resync = false;  // read whole windows at the next chance (after an outage)
  std::int64_t resolution_ns() const noexcept { return std::int64_t{resolution_ms} * 1'000'000; }
};

// One boundary read of one geometry, in flight on the background connection. It owns
// itself: the last reply (or failure) finishes it.
//
// Without `whole`, it first asks for the change sets of its epochs; as each one arrives,
// the windows it names (other nodes' writes, of limiters active here) are asked for at
// once, so Redis works on windows while later change sets are still being parsed here.
// Windows are read with MGET, kKeysPerRead a command: Redis spends about a third of what
// single GETs cost, and replies come in few large arrays. On a Redis Cluster an MGET's
// keys must share a hash slot: there the windows are sorted by slot and each MGET asks
// for one slot's. Each command goes to the node that serves its slot.
struct BoundarySync::Batch {
  static constexpr std::size_t kKeysPerRead = 128;
  // A command in flight: a change set (`windows` false) or the windows of
  // resources[index .. index + count).
  struct Slot {
    Batch* batch;
    std::size_t index;
    std::size_t count;
    bool windows;
  };
  BoundarySync* sync = nullptr;
  Geometry* geometry = nullptr;
  std::int64_t epoch_now = 0;            // decode windows as of this epoch
  std::vector<std::int64_t> epochs;      // the closed epochs this read covers
  std::vector<std::uint64_t> resources;  // the windows asked for
  std::vector<std::uint64_t> found;      // scratch: what one change set names
  std::deque<Slot> slots;                // stable: contexts of commands in flight
  std::vector<std::uint64_t> counts;     // decoding scratch
  std::vector<EpochCount> merged;        // merging scratch: the counts of a reply's windows
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // per window: its span of them
  std::vector<SharedCounts> windows;                        // merging scratch: a reply's windows
  RespWriter command;                                       // formatting scratch
  std::vector<std::pair<std::uint16_t, std::uint64_t>> by_slot;  // sorting scratch
  std::vector<AsyncRedis*> used;  // the connections written to
  std::size_t in_flight = 0;
  std::size_t change_sets = 0;
  std::size_t key_errors = 0;
  std::string first_error;  // the first key error's reply, with its command
  bool ok = true;
  std::int64_t started_ns = 0;
  std::function<void(bool)> done;

  // Phase 1: every change set of `epochs` in the shards with active limiters.
  void ask_change_sets();
  // Asks for the windows of resources[from ..] (MGETs of kKeysPerRead keys).
  void ask_windows(std::size_t from);
  // Sends a formatted command to the node of `key_slot`. False if the batch has failed
  // (that node is not connected: its epochs are read again later). A node that is down
  // is skipped (true; it is read whole when it is back).
  bool send(std::string_view formatted, Slot slot, std::uint16_t key_slot);
  void take(const Slot& slot, const redisReply* r);
  // `keys` keys could not be read: `r` answered `what` (the first such answer is kept).
  void key_error(std::string_view what, const redisReply& r, std::size_t keys = 1) {
    key_errors += keys;
    if (!first_error.empty()) return;
    first_error = std::string(what) + ": ";
    first_error += r.type == REDIS_REPLY_ERROR ? std::string_view(r.str, r.len)
                                                 : std::string_view("an unexpected reply");
  }
  void take_change_set(std::string_view value);
  // Decodes the window of resources[index] into `merged` and `ranges`.
  void take_window(std::size_t index, std::string_view value);
  // Merges what take_window() gathered.
  void merge_windows();
  // Called when a command is answered or could not be sent: finishes the batch after the
  // last one.
  void settle();
  void finish();
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
  // (Due by this machine's steady clock, scored on the shared one: an engine whose clock
  // stands still, as a test's may, still heartbeats.)
  if (available && steady_ns() >= next_heartbeat_ && !heartbeat_in_flight_) heartbeat(now);
  std::uint64_t active = 0;
  for (auto& entry : geometries_) {
    Geometry& g = entry.second;
    const std::int64_t r = g.resolution_ns();
    const std::int64_t n = g.subintervals;
    const std::int64_t e = SlidingWindow::epoch_of(now, r);
    if (now >= g.next_boundary * r + settle_ns(g)) {
      // Only epochs that closed at least the settle delay ago (a tick late by more than a
      // subinterval must not read one that just closed).
      const std::int64_t settled = SlidingWindow::epoch_of(now - settle_ns(g), r);
      // The epochs that closed since the last boundary handled (several if this tick is
      // late), no older than the window.
      for (std::int64_t x = std::max(g.next_boundary - 1, e - n); x < settled; ++x)
        g.unread.insert(x);
      g.next_boundary = settled + 1;
      // Limiters not used here for a whole window stop being read: if one is used
      // again, its window is loaded afresh (a warm start).
      std::erase_if(g.active, [&](const auto& use) { return use.second < e - n - 1; });
    }
    std::erase_if(g.unread, [&](std::int64_t x) { return x < e - n; });
    active += g.active.size();
    if (g.reading > 0 || g.active.empty() || !available || (g.unread.empty() && !g.resync))
      continue;
    std::vector<std::int64_t> epochs(g.unread.begin(), g.unread.end());
    // Change sets expire with epoch + 2: a read that would come after that reads every
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

void BoundarySync::heartbeat(std::int64_t now) {
  AsyncRedis* connection = nullptr;
  const std::string key = layout_.nodes_key();
  if (router_ == nullptr || !router_->route(key_slot(key), connection).ok())
    return;  // tried again at the next tick
  next_heartbeat_ = steady_ns() + kHeartbeatNs;
  heartbeat_in_flight_ = true;
  RespWriter commands;
  layout_.append_heartbeat(now / 1'000'000, kLiveMs, commands);
  for (std::size_t i = 0; i + 1 < commands.commands(); ++i)
    connection->command_resp(commands.command_bytes(i), nullptr);
  connection->command_resp(commands.command_bytes(commands.commands() - 1),
                           [this, key](const redisReply* r, const Status&) {
                             heartbeat_in_flight_ = false;
                             // (A failure, or a redirection while a slot moves, leaves the
                             // last count.)
                             if (r != nullptr && r->type == REDIS_REPLY_INTEGER) {
                               reporter_.note_success();
                               if (r->integer > 0)
                                 take_live_count(static_cast<std::uint32_t>(r->integer));
                             } else if (r != nullptr && r->type == REDIS_REPLY_ERROR &&
                                        !redirected(*r)) {
                               reporter_.note_error("heartbeat (" + key + "): " +
                                                    std::string(r->str, r->len));
                             }
                           });
}

void BoundarySync::take_live_count(std::uint32_t seen) {
  // A rise counts at once; a fall once it has lasted as long as a node stays live: a
  // Redis that restarted empty, or nodes that have not heartbeat to it since, must not
  // make the count (and the partitioned shares) fall for a moment.
  const std::int64_t now = steady_ns();
  if (seen < live_nodes()) {
    if (fewer_since_ == INT64_MIN) fewer_since_ = now;
    if (now - fewer_since_ < kLiveMs * 1'000'000) return;
  }
  live_nodes_.store(seen, std::memory_order_relaxed);
  fewer_since_ = INT64_MIN;
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
  auto all_ok = std::make_shared<bool>(router_ != nullptr && router_->all_ready());
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
  if (router_ == nullptr) {
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
  ++g.reading;
  ++batch->in_flight;  // held while queueing, so that no reply finishes the batch early
  if (whole) {
    batch->resources.reserve(g.active.size());
    for (const auto& [resource, last] : g.active) batch->resources.push_back(resource);
    batch->ask_windows(0);
  } else {
    batch->ask_change_sets();
  }
  // Not inside a reply's callback here: let Redis start now.
  for (AsyncRedis* c : batch->used) c->flush();
  --batch->in_flight;
  batch->settle();
}

bool BoundarySync::Batch::send(std::string_view formatted, Slot slot, std::uint16_t key_slot) {
  if (!ok) return false;
  AsyncRedis* connection = nullptr;
  if (const Status routed = sync->router_->route(key_slot, connection); !routed.ok()) {
    if (routed.code() == Status::Code::closed) return true;  // its node is down: left out
    ok = false;  // not connected: the epochs are read again next time
    return false;
  }
  slots.push_back(slot);
  if (!connection->command_formatted(formatted, &slots.back())) {
    slots.pop_back();
    ok = false;
    return false;
  }
  if (std::find(used.begin(), used.end(), connection) == used.end()) used.push_back(connection);
  ++in_flight;
  return true;
}

void BoundarySync::Batch::ask_change_sets() {
  std::uint64_t shards = 0;  // a bit per change-set shard with an active limiter
  for (const auto& [resource, last] : geometry->active)
    shards |= std::uint64_t{1} << StoreLayout::change_set_shard(resource);
  for (const std::int64_t x : epochs) {
    for (unsigned shard = 0; shard < StoreLayout::kChangeSetShards; ++shard) {
      if ((shards >> shard & 1) == 0) continue;
      ++change_sets;
      command.clear();
      command.command(2);
      command.arg("GET");
      sync->layout_.append_change_set_key(geometry->resolution_ms, geometry->subintervals, shard,
                                          x, command);
      if (!send(command.bytes(), {this, 0, 1, false}, StoreLayout::change_set_slot(shard))) return;
    }
  }
}

void BoundarySync::Batch::ask_windows(std::size_t from) {
  const bool cross_slot = sync->router_->cross_slot();
  if (!cross_slot) {
    // One slot a command: sorted by slot.
    by_slot.clear();
    for (std::size_t i = from; i < resources.size(); ++i)
      by_slot.emplace_back(resource_slot(resources[i]), resources[i]);
    std::sort(by_slot.begin(), by_slot.end());
    for (std::size_t i = from; i < resources.size(); ++i) resources[i] = by_slot[i - from].second;
  }
  for (std::size_t first = from; first < resources.size();) {
    std::size_t count = std::min(kKeysPerRead, resources.size() - first);
    const std::uint16_t slot = cross_slot ? 0 : by_slot[first - from].first;
    if (!cross_slot) {
      count = 1;
      while (count < kKeysPerRead && first + count < resources.size() &&
             by_slot[first + count - from].first == slot) {
        ++count;
      }
    }
    command.clear();
    command.command(count + 1);
    command.arg("MGET");
    for (std::size_t i = first; i < first + count; ++i) {
      sync->layout_.append_window_key(
          {resources[i], geometry->resolution_ms, geometry->subintervals}, command);
    }
    if (!send(command.bytes(), {this, first, count, true}, slot)) return;
    first += count;
  }
}

void BoundarySync::on_reply(const redisReply* r, void* context) {
  const auto& slot = *static_cast<const Batch::Slot*>(context);
  slot.batch->take(slot, r);
}

void BoundarySync::Batch::take(const Slot& slot, const redisReply* r) {
  if (r == nullptr) {
    ok = false;  // the connection failed: the epochs are read again next time
  } else if (r->type == REDIS_REPLY_ERROR && redirected(*r)) {
    // The slot is moving, or moved: the epochs are read again once the map is.
    ok = false;
    sync->router_->moved();
  } else if (!slot.windows) {
    if (r->type == REDIS_REPLY_STRING) {
      take_change_set(std::string_view(r->str, r->len));
    } else if (r->type != REDIS_REPLY_NIL) {
      key_error("reading a change set", *r);
    }
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements == slot.count) {
    for (std::size_t i = 0; i < slot.count; ++i) {
      const redisReply& e = *r->element[i];
      if (e.type == REDIS_REPLY_STRING) {
        take_window(slot.index + i, std::string_view(e.str, e.len));
      } else if (e.type != REDIS_REPLY_NIL) {
        // This key alone (say, WRONGTYPE: something else wrote it).
        key_error("reading a window", e);
      }
    }
    merge_windows();
  } else {
    key_error("reading windows (MGET)", *r, slot.count);
  }
  --in_flight;
  settle();
}

void BoundarySync::Batch::take_change_set(std::string_view value) {
  found.clear();
  sync->layout_.others_in_change_set(value, [&](std::uint64_t resource) {
    if (geometry->active.contains(resource)) found.push_back(resource);
  });
  // Several nodes may have written one resource: read it once. (A resource named in
  // the change sets of two epochs is read twice: rare, and harmless.)
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  const std::size_t from = resources.size();
  resources.insert(resources.end(), found.begin(), found.end());
  ask_windows(from);  // inside a reply's callback: written once the replies read are handled
}

void BoundarySync::Batch::take_window(std::size_t index, std::string_view value) {
  const std::uint32_t n = geometry->subintervals;
  counts.resize(std::size_t{n} + 1);
  StoreLayout::decode(value, epoch_now, n, counts);
  const std::size_t from = merged.size();
  // Closed epochs only (k = 0 is the one under way): merging an epoch the record has not
  // reached would move its window on, and this engine would then miss its own first use
  // in that epoch (activity, LRU order).
  for (std::size_t k = 1; k < counts.size(); ++k) {
    if (counts[k] != 0) merged.push_back({epoch_now - static_cast<std::int64_t>(k), counts[k]});
  }
  if (merged.size() > from) ranges.emplace_back(index, from);
}

void BoundarySync::Batch::merge_windows() {
  windows.clear();
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const std::size_t end = i + 1 < ranges.size() ? ranges[i + 1].second : merged.size();
    windows.push_back(
        {{resources[ranges[i].first], geometry->resolution_ms, geometry->subintervals},
         std::span<const EpochCount>(merged).subspan(ranges[i].second, end - ranges[i].second)});
  }
  if (!windows.empty()) sync->target_.merge(windows);
  merged.clear();
  ranges.clear();
}

void BoundarySync::Batch::settle() {
  if (in_flight == 0) finish();
}

void BoundarySync::Batch::finish() {
  const std::int64_t took = steady_ns() - started_ns;
  sync->last_keys_.store(resources.size(), std::memory_order_relaxed);
  sync->last_change_sets_.store(change_sets, std::memory_order_relaxed);
  sync->last_ns_.store(took, std::memory_order_relaxed);
  if (took > sync->max_ns_.load(std::memory_order_relaxed)) {
    sync->max_ns_.store(took, std::memory_order_relaxed);
  }
  // Counted last, released: stats that see this round see what it read (or a later
  // round's), never the round before's.
  (ok ? sync->rounds_ : sync->failures_).fetch_add(1, std::memory_order_release);
  if (key_errors > 0) {
    sync->reporter_.note_error("boundary read: " + std::to_string(key_errors) +
                               " keys could not be read; " + first_error);
  }
  --geometry->reading;
  done(ok);
  delete this;
}

void BoundarySync::add_stats(Stats& s) const {
  s.sync_rounds = rounds_.load(std::memory_order_acquire);
  s.sync_failures = failures_.load(std::memory_order_acquire);
  s.sync_last_keys = last_keys_.load(std::memory_order_relaxed);
  s.sync_last_change_sets = last_change_sets_.load(std::memory_order_relaxed);
  s.sync_last_duration = std::chrono::nanoseconds(last_ns_.load(std::memory_order_relaxed));
  s.sync_max_duration = std::chrono::nanoseconds(max_ns_.load(std::memory_order_relaxed));
  s.active_limiters = active_.load(std::memory_order_relaxed);
  s.live_nodes = live_nodes();
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
