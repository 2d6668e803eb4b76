#include "redis/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>

#include "core/window.h"

namespace ratewin::inline v1::detail {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Writes a decimal number into `buf` and returns a view of it.
template <class T>
std::string_view decimal(char (&buf)[24], T value) {
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string_view(buf, static_cast<std::size_t>(end - buf));
}

// A count read back from a hash field: nil (no count yet) reads as 0.
std::uint64_t count_of(const redisReply* r) {
  if (r == nullptr) return 0;
  if (r->type == REDIS_REPLY_INTEGER)
    return r->integer > 0 ? static_cast<std::uint64_t>(r->integer) : 0;
  if (r->type != REDIS_REPLY_STRING) return 0;
  std::int64_t value = 0;
  std::from_chars(r->str, r->str + r->len, value);
  return value > 0 ? static_cast<std::uint64_t>(value) : 0;
}

}  // namespace

// Fields are epoch numbers modulo m (see KeyLayout). Relative to the writer's epoch,
// a field's age (now - field) mod m is: 0..n-1 the window's subintervals, n the trailing
// one, n+1 just out (kept for writers one epoch behind), n+2 .. m/2-1 stale (deleted
// when adding), m/2 .. m-1 ahead of the writer (a node whose epoch has already moved on,
// or this write arriving late): kept, and not counted, as they are not in its window.
// The TTL and m leave no field old enough to be mistaken for one ahead. Stale fields go
// in chunks (Lua's unpack takes only some thousands of values; N may be 65535).
const char* const kWriteScript =
    "local now, cost, m, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4]), "
    "tonumber(ARGV[5])\n"
    "local counts, stale = {}, {}\n"
    "for i = 1, n + 1 do counts[i] = 0 end\n"
    "local all = redis.call('HGETALL', KEYS[1])\n"
    "for i = 1, #all, 2 do\n"
    "  local age = (now - tonumber(all[i])) % m\n"
    "  if age <= n then counts[age + 1] = tonumber(all[i + 1])\n"
    "  elseif age > n + 1 and age < m / 2 then stale[#stale + 1] = all[i] end\n"
    "end\n"
    "local sum = cost\n"
    "for i = 1, n do sum = sum + counts[i] end\n"
    "local admitted = 0\n"
    "if sum * 1048576 + counts[n + 1] * tonumber(ARGV[7]) <= tonumber(ARGV[6]) * 1048576 then\n"
    "  if cost > 0 then\n"
    "    counts[1] = redis.call('HINCRBY', KEYS[1], ARGV[1], cost)\n"
    "    redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "    for i = 1, #stale, 1000 do\n"
    "      redis.call('HDEL', KEYS[1], unpack(stale, i, math.min(i + 999, #stale)))\n"
    "    end\n"
    "  end\n"
    "  admitted = 1\n"
    "end\n"
    "table.insert(counts, 1, admitted)\n"
    "return counts\n";

const char* const kGiveBackScript =
    "local c = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')\n"
    "local d = math.min(c, tonumber(ARGV[2]))\n"
    "if d > 0 then redis.call('HINCRBY', KEYS[1], ARGV[1], -d) end\n"
    "return d\n";

void KeyLayout::hex16(char* out, std::uint64_t resource) noexcept {
  constexpr char kDigits[] = "0123456789abcdef";
  for (int i = 15; i >= 0; --i, resource >>= 4) out[i] = kDigits[resource & 15];
}

std::string KeyLayout::tail(std::uint32_t resolution_ms, std::uint32_t subintervals) {
  return "}:" + std::to_string(resolution_ms) + "x" + std::to_string(subintervals);
}

std::string KeyLayout::key(const LimiterKey& k) const {
  std::string key = head();
  key.append(16, '0');
  hex16(key.data() + key.size() - 16, k.resource);
  return key + tail(k.resolution_ms, k.subintervals);
}

std::uint64_t KeyLayout::modulus(std::uint32_t subintervals) noexcept {
  return std::max<std::uint64_t>(16, std::bit_ceil(2 * (2 * std::uint64_t{subintervals} + 5)));
}

std::uint64_t KeyLayout::field(std::int64_t epoch, std::uint32_t subintervals) noexcept {
  const auto m = static_cast<std::int64_t>(modulus(subintervals));
  const std::int64_t r = epoch % m;
  return static_cast<std::uint64_t>(r < 0 ? r + m : r);
}

std::int64_t KeyLayout::ttl_ms(const LimiterKey& k) noexcept {
  return (std::int64_t{k.subintervals} + 3) * std::int64_t{k.resolution_ms};
}

// One boundary read of a geometry: an HMGET per active limiter, all in flight at once.
// It owns itself: the last reply (or failure) finishes it.
struct RedisStore::Batch {
  struct Slot {
    Batch* batch;
    std::size_t index;
  };
  RedisStore* store;
  Geometry* geometry;
  std::vector<std::uint64_t> resources;
  std::vector<std::int64_t> epochs;
  std::vector<std::uint64_t> counts;  // resources x epochs
  std::vector<Slot> slots;
  std::size_t remaining = 0;
  std::size_t key_errors = 0;
  bool ok = true;
  std::int64_t started_ns = 0;
  std::function<void(bool)> done;

  static void on_reply(const redisReply* r, void* context) {
    const Slot& slot = *static_cast<const Slot*>(context);
    Batch& b = *slot.batch;
    const std::size_t width = b.epochs.size();
    if (r == nullptr) {
      b.ok = false;  // the connection failed: the epochs are read again next time
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != width) {
      // This key alone could not be read (say, WRONGTYPE: something else wrote it): its
      // counts stay as they are, and the rest of the batch stands.
      ++b.key_errors;
    } else {
      for (std::size_t j = 0; j < width; ++j)
        b.counts[slot.index * width + j] = count_of(r->element[j]);
    }
    if (--b.remaining == 0) b.finish();
  }
  void finish();
};

RedisStore::RedisStore(const Options& options, std::shared_ptr<const Clock> clock,
                       SyncTarget& target)
    : options_(options),
      endpoint_(RedisEndpoint::parse(options.redis)),
      clock_(std::move(clock)),
      layout_{options.key_prefix},
      target_(target),
      pool_(endpoint_, options.connect_timeout, options.command_timeout, options.max_connections) {
  if (connect_now()) {
    available_.store(true, std::memory_order_release);
  } else {
    circuit_opens_.fetch_add(1, std::memory_order_relaxed);
    down_since_ns_.store(steady_ns(), std::memory_order_relaxed);
    log(LogLevel::warning, "Redis at " + endpoint_.describe() + " is not reachable yet (" +
                               last_error_ + "); deciding with local counts until it is");
  }
  loop_.post([this] {
    uv_timer_init(loop_.loop(), &tick_timer_);
    tick_timer_.data = this;
    uv_timer_init(loop_.loop(), &clock_timer_);
    clock_timer_.data = this;
    async_ = std::make_unique<AsyncRedis>(
        loop_.loop(), endpoint_, options_.connect_timeout, options_.command_timeout,
        AsyncRedis::Events{[this] { on_ready(); },
                           [this](const std::string& error, bool dropped) {
                             on_lost(error, dropped);
                           }});
    async_->set_raw_handler(&Batch::on_reply);
    async_->start();
    if (options_.sync_clock && options_.clock_sync_interval.count() > 0) {
      const auto every = static_cast<std::uint64_t>(options_.clock_sync_interval.count());
      uv_timer_start(&clock_timer_, &RedisStore::on_clock_timer, every, every);
    }
    schedule_tick();
  });
}

RedisStore::~RedisStore() { shutdown(); }

void RedisStore::shutdown() {
  if (shut_down_.exchange(true)) return;
  loop_close_result_ = loop_.stop([this] {
    if (async_) async_->close();
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_timer_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&clock_timer_), nullptr);
  });
  async_.reset();
  if (loop_close_result_ != 0) {
    log(LogLevel::error,
        std::string("the store's loop did not close cleanly: ") + uv_strerror(loop_close_result_));
  }
}

void RedisStore::log(LogLevel level, const std::string& message) const {
  if (options_.logger) options_.logger(level, message);
}

void RedisStore::note_error(const std::string& error) {
  std::lock_guard lock(mutex_);
  last_error_ = error;
}

std::optional<std::string> RedisStore::script_sha() const {
  std::lock_guard lock(mutex_);
  if (sha_.empty()) return std::nullopt;
  return sha_;
}

bool RedisStore::connect_now() {
  std::string error;
  RedisPool::Failure failure{};
  RedisPool::Lease lease =
      pool_.acquire(std::chrono::steady_clock::now() + options_.command_timeout, failure, error);
  if (!lease) {
    note_error(error);
    return false;
  }
  std::string sha;
  std::string refused;
  if (!lease->round_trip(
          {"SCRIPT", "LOAD", kWriteScript},
          [&](std::size_t, const redisReply& r) {
            if (r.type == REDIS_REPLY_STRING) {
              sha.assign(r.str, r.len);
            } else {
              refused = reply_text(r);
            }
          },
          error)) {
    note_error("loading the write script: " + error);
    return false;
  }
  if (!refused.empty()) {
    // Redis answers but refuses scripts: writes will fall back to EVAL, and fail too.
    note_error("SCRIPT LOAD refused: " + refused);
  }
  {
    std::lock_guard lock(mutex_);
    sha_ = sha;
  }
  if (options_.sync_clock) {
    for (int i = 0; i < 3; ++i) {
      const std::int64_t sent = clock_->now().count();
      std::optional<std::int64_t> server;
      std::string time_refused;
      if (!lease->round_trip(
              {"TIME"},
              [&](std::size_t, const redisReply& r) {
                server = server_time(r);
                if (!server) time_refused = reply_text(r);
              },
              error)) {
        note_error("reading the Redis clock: " + error);
        return false;
      }
      if (!server) {
        clock_refused(time_refused);
        break;
      }
      take_clock_sample(sent, clock_->now().count(), *server);
    }
  }
  return true;
}

std::optional<std::int64_t> RedisStore::server_time(const redisReply& r) {
  // TIME: [seconds, microseconds], both decimal strings.
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2) return std::nullopt;
  std::int64_t parts[2] = {0, 0};
  for (std::size_t i = 0; i < 2; ++i) {
    const redisReply* e = r.element[i];
    if (e == nullptr || e->type != REDIS_REPLY_STRING) return std::nullopt;
    const auto [end, ec] = std::from_chars(e->str, e->str + e->len, parts[i]);
    if (ec != std::errc() || end != e->str + e->len || parts[i] < 0) return std::nullopt;
  }
  if (parts[0] == 0 || parts[0] > 9'000'000'000 || parts[1] >= 1'000'000) return std::nullopt;
  return parts[0] * 1'000'000'000 + parts[1] * 1'000;
}

void RedisStore::clock_refused(const std::string& reply) {
  note_error("TIME refused: " + reply);
  if (!clock_warned_.exchange(true)) {
    log(LogLevel::warning, "Redis at " + endpoint_.describe() + " refuses TIME (" + reply +
                               "); epochs follow this node's own clock, so nodes whose clocks "
                               "differ will not agree on subinterval boundaries");
  }
}

std::chrono::nanoseconds RedisStore::retry_hint() const noexcept {
  return available() ? nanoseconds(0) : std::chrono::seconds(1);
}

void RedisStore::failed(const std::string& error, bool network) {
  note_error(error);
  if (network) open_circuit(error);
}

void RedisStore::open_circuit(const std::string& why) {
  if (!available_.exchange(false, std::memory_order_acq_rel)) return;
  circuit_opens_.fetch_add(1, std::memory_order_relaxed);
  down_since_ns_.store(steady_ns(), std::memory_order_relaxed);
  log(LogLevel::warning, "Redis at " + endpoint_.describe() + " unreachable (" + why +
                             "); deciding with local counts until it is back");
  // Find out when it is back: a probe now, and from each tick while the circuit is open.
  loop_.post([this] { probe(); });
}

void RedisStore::probe() {
  // The background connection reconnects on its own while Redis is away (and probes when
  // it is back); while it is up, a ROLE that says "master" closes the circuit. A server
  // that is a replica (after a failover, this address may point to the old master) or
  // cannot serve keeps it open; one that denies ROLE is taken at its word that it works.
  if (probing_ || async_ == nullptr || !async_->ready()) return;
  probing_ = true;
  last_probe_ns_ = steady_ns();
  async_->command({"ROLE"}, [this](const redisReply* reply, const std::string& error) {
    probing_ = false;
    if (reply == nullptr) {
      note_error("probe: " + error);
      return;
    }
    bool serves = true;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
        reply->element[0]->type == REDIS_REPLY_STRING) {
      serves = std::string_view(reply->element[0]->str, reply->element[0]->len) == "master";
    } else if (server_unavailable(*reply)) {
      serves = false;
    }
    if (!serves) {
      note_error("Redis at " + endpoint_.describe() + " cannot take writes now (ROLE: " +
                 (reply->type == REDIS_REPLY_ARRAY ? std::string(reply->element[0]->str,
                                                                 reply->element[0]->len)
                                                   : reply_text(*reply)) +
                 ")");
      return;
    }
    if (!available()) recover();
  });
}

std::optional<bool> RedisStore::add(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost,
                                    std::uint64_t max, std::uint32_t trailing_weight,
                                    std::span<std::uint64_t> counts) {
  if (!available()) {
    writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  // One deadline for the whole call: waiting for a connection and every round trip.
  // Opening a connection adds its own time (at most the connect timeout).
  const std::int64_t started = steady_ns();
  RedisConnection::Deadline deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  std::string error;
  RedisPool::Failure failure{};
  RedisPool::Lease lease = pool_.acquire(deadline, failure, error);
  if (!lease) {
    writes_failed_.fetch_add(1, std::memory_order_relaxed);
    // Busy connections say nothing about Redis' health.
    failed("write: " + error, failure == RedisPool::Failure::kConnect);
    return std::nullopt;
  }
  if (lease.fresh()) {
    deadline = std::max(deadline, std::chrono::steady_clock::now() + options_.command_timeout);
  }
  if (!available()) {  // the circuit opened while this call waited
    writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const std::string k = layout_.key(key);
  char field[24], amount[24], ttl[24], modulus[24], n[24], limit[24], weight[24];
  const std::string_view args[] = {decimal(field, KeyLayout::field(epoch, key.subintervals)),
                                   decimal(amount, cost),
                                   decimal(ttl, KeyLayout::ttl_ms(key)),
                                   decimal(modulus, KeyLayout::modulus(key.subintervals)),
                                   decimal(n, key.subintervals),
                                   decimal(limit, max),
                                   decimal(weight, trailing_weight)};
  std::int64_t admitted = -1;
  bool noscript = false;
  bool unavailable = false;
  std::string refused;
  auto on_reply = [&](std::size_t, const redisReply& r) {
    if (r.type == REDIS_REPLY_ARRAY && r.elements == counts.size() + 1 &&
        r.element[0]->type == REDIS_REPLY_INTEGER) {
      admitted = r.element[0]->integer;
      for (std::size_t i = 0; i < counts.size(); ++i) counts[i] = count_of(r.element[i + 1]);
    } else if (r.type == REDIS_REPLY_ERROR &&
               std::string_view(r.str, r.len).starts_with("NOSCRIPT")) {
      noscript = true;
    } else {
      unavailable = server_unavailable(r);
      refused = reply_text(r);
    }
  };
  const std::optional<std::string> sha = script_sha();
  bool ok = true;
  if (sha) {
    ok = lease->round_trip(
        {"EVALSHA", *sha, "1", k, args[0], args[1], args[2], args[3], args[4], args[5], args[6]},
        on_reply, deadline, error);
  }
  if (!sha || (ok && noscript)) {
    // Redis restarted (its script cache is empty) or the script was never loaded: EVAL
    // runs it and caches it under the same digest. Within the same deadline.
    ok = lease->round_trip({"EVAL", kWriteScript, "1", k, args[0], args[1], args[2], args[3],
                            args[4], args[5], args[6]},
                           on_reply, deadline, error);
  }
  if (!ok || unavailable) {
    // A server that cannot serve (a replica after a failover, loading, busy) is as good
    // as unreachable: drop the connection, open the circuit; reconnecting finds out more.
    if (unavailable) {
      lease->discard();
      error = "Redis cannot serve: " + refused;
    }
    writes_failed_.fetch_add(1, std::memory_order_relaxed);
    failed("write: " + error, true);
    return std::nullopt;
  }
  if (admitted < 0) {
    writes_failed_.fetch_add(1, std::memory_order_relaxed);
    failed("write refused by Redis: " + refused, false);
    return std::nullopt;
  }
  if (cost != 0) {  // a question (cost 0) wrote nothing
    writes_ok_.fetch_add(1, std::memory_order_relaxed);
    write_latency_.record(nanoseconds(steady_ns() - started));
  }
  return admitted == 1;
}

void RedisStore::remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost) {
  if (!available()) return;
  const RedisConnection::Deadline deadline =
      std::chrono::steady_clock::now() + options_.command_timeout;
  std::string error;
  RedisPool::Failure failure{};
  RedisPool::Lease lease = pool_.acquire(deadline, failure, error);
  std::string refused;
  char field[24], amount[24];
  // Rare (a multi-limit request refused after some limits counted it): EVAL, whose
  // script Redis caches, rather than a second script to keep loaded.
  if (lease && lease->round_trip({"EVAL", kGiveBackScript, "1", layout_.key(key),
                                  decimal(field, KeyLayout::field(epoch, key.subintervals)),
                                  decimal(amount, cost)},
                                 [&](std::size_t, const redisReply& r) {
                                   if (r.type == REDIS_REPLY_ERROR) refused = reply_text(r);
                                 },
                                 deadline, error) &&
      refused.empty()) {
    return;
  }
  // Not fatal: the count stays (the shared estimate errs on the safe side) and expires.
  note_error("giving back a count: " + (refused.empty() ? error : refused));
}

void RedisStore::add_stats(Stats& s) const {
  s.store = true;
  s.store_available = available();
  s.circuit_opens = circuit_opens_.load(std::memory_order_relaxed);
  s.connections = connections_.load(std::memory_order_relaxed);
  s.writes_ok = writes_ok_.load(std::memory_order_relaxed);
  s.writes_failed = writes_failed_.load(std::memory_order_relaxed);
  s.writes_skipped = writes_skipped_.load(std::memory_order_relaxed);
  s.write_p50 = write_latency_.quantile(0.5);
  s.write_p90 = write_latency_.quantile(0.9);
  s.write_p99 = write_latency_.quantile(0.99);
  s.write_max = write_latency_.max();
  s.sync_rounds = sync_rounds_.load(std::memory_order_relaxed);
  s.sync_failures = sync_failures_.load(std::memory_order_relaxed);
  s.sync_last_keys = sync_last_keys_.load(std::memory_order_relaxed);
  s.sync_last_duration = nanoseconds(sync_last_ns_.load(std::memory_order_relaxed));
  s.sync_max_duration = nanoseconds(sync_max_ns_.load(std::memory_order_relaxed));
  s.active_limiters = active_limiters_.load(std::memory_order_relaxed);
  s.clock_offset = nanoseconds(clock_offset());
  s.clock_rtt = nanoseconds(rtt_ns_.load(std::memory_order_relaxed));
  std::lock_guard lock(mutex_);
  s.last_error = last_error_;
}

// ---- loop thread ----

void RedisStore::on_ready() {
  connections_.fetch_add(1, std::memory_order_relaxed);
  async_->command({"SCRIPT", "LOAD", kWriteScript},
                  [this](const redisReply* r, const std::string&) {
                    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
                      std::lock_guard lock(mutex_);
                      sha_.assign(r->str, r->len);
                    }
                  });
  if (options_.sync_clock) probe_clock(5);
  if (!available()) probe();
}

void RedisStore::on_lost(const std::string& error, bool dropped) {
  note_error(error);
  if (dropped) {
    // Redis closed a working connection (its idle timeout, a restart): the background
    // connection is being made again at once. Only if that fails is Redis unreachable.
    log(LogLevel::debug, error + "; reconnecting");
  } else if (available()) {
    open_circuit(error);
  } else {
    log(LogLevel::debug, error);
  }
}

void RedisStore::recover() {
  pool_.drop_idle();  // connections opened before the outage may be dead
  if (!available_.exchange(true, std::memory_order_acq_rel)) {
    const std::int64_t down = steady_ns() - down_since_ns_.load(std::memory_order_relaxed);
    log(LogLevel::info, "Redis at " + endpoint_.describe() + " reachable again after " +
                            std::to_string(down / 1'000'000) + " ms; re-reading active limiters");
  }
  for (auto& [id, g] : geometries_) g.resync = true;
  uv_timer_start(&tick_timer_, &RedisStore::on_tick, 0, 0);
}

void RedisStore::probe_clock(int samples) {
  if (async_ == nullptr || !async_->ready()) return;
  const std::int64_t sent = clock_->now().count();
  async_->command({"TIME"}, [this, sent, samples](const redisReply* r, const std::string&) {
    const std::int64_t received = clock_->now().count();
    if (r == nullptr) return;  // the connection failed: the next probe tries again
    const std::optional<std::int64_t> server = server_time(*r);
    if (!server) {
      clock_refused(reply_text(*r));
      return;
    }
    take_clock_sample(sent, received, *server);
    if (samples > 1) probe_clock(samples - 1);
  });
}

void RedisStore::take_clock_sample(std::int64_t sent, std::int64_t received,
                                   std::int64_t server_ns) {
  // NTP-style: the server read its clock somewhere within the round trip; assume the
  // middle. Keep the last 8 samples and trust the one with the shortest round trip.
  const std::int64_t rtt = received - sent;
  const std::int64_t offset = server_ns - (sent + rtt / 2);
  if (!clock_samples_.empty()) {
    // If the new offset is outside what the best sample allows (each is known to within
    // its round trip), a clock stepped (NTP, a VM migration): the old samples describe
    // a clock that no longer exists.
    const auto best = *std::min_element(clock_samples_.begin(), clock_samples_.end());
    const std::int64_t slack = best.first + rtt + 1'000'000;
    if (offset > best.second + slack || offset < best.second - slack) clock_samples_.clear();
  }
  clock_samples_.emplace_back(rtt, offset);
  if (clock_samples_.size() > 8) clock_samples_.erase(clock_samples_.begin());
  const auto best = *std::min_element(clock_samples_.begin(), clock_samples_.end());
  rtt_ns_.store(best.first, std::memory_order_relaxed);
  offset_ns_.store(best.second, std::memory_order_relaxed);
}

void RedisStore::on_clock_timer(uv_timer_t* timer) {
  static_cast<RedisStore*>(timer->data)->probe_clock(1);
}

void RedisStore::on_tick(uv_timer_t* timer) { static_cast<RedisStore*>(timer->data)->tick(); }

void RedisStore::absorb_activity(std::int64_t now) {
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

void RedisStore::tick() {
  const std::int64_t now = aligned_now();
  absorb_activity(now);
  if (!available() && steady_ns() - last_probe_ns_ >= 200'000'000) probe();
  std::uint64_t active = 0;
  for (auto& entry : geometries_) {
    Geometry& g = entry.second;
    const std::int64_t r = g.resolution_ns();
    const std::int64_t n = g.subintervals;
    const std::int64_t e = SlidingWindow::epoch_of(now, r);
    const std::int64_t settle =
        std::min<std::int64_t>(options_.sync_settle.count() * 1'000'000, r / 4);
    if (now >= g.next_boundary * r + settle) {
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
    if (g.reading || g.active.empty() || !available()) continue;
    std::vector<std::int64_t> epochs;
    if (g.resync) {
      for (std::int64_t x = e - n; x <= e; ++x) epochs.push_back(x);
    } else {
      epochs.assign(g.unread.begin(), g.unread.end());
    }
    if (epochs.empty()) continue;
    const bool resync = g.resync;
    read(g, epochs, [&g, epochs, resync](bool ok) {
      if (!ok) return;
      if (resync) g.resync = false;
      for (const std::int64_t x : epochs) g.unread.erase(x);
    });
  }
  active_limiters_.store(active, std::memory_order_relaxed);
  schedule_tick();
}

void RedisStore::schedule_tick() {
  if (shut_down_.load(std::memory_order_relaxed)) return;
  // Wake at the next boundary (+ settle) of any geometry, and at least every 50 ms to
  // take in limiters of geometries not seen yet.
  const std::int64_t now = aligned_now();
  std::int64_t delay = 50'000'000;
  for (const auto& [id, g] : geometries_) {
    const std::int64_t r = g.resolution_ns();
    const std::int64_t settle =
        std::min<std::int64_t>(options_.sync_settle.count() * 1'000'000, r / 4);
    delay = std::min(delay, g.next_boundary * r + settle - now);
  }
  const auto ms =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, (delay + 999'999) / 1'000'000));
  uv_timer_start(&tick_timer_, &RedisStore::on_tick, ms, 0);
}

void RedisStore::read(Geometry& g, std::vector<std::int64_t> epochs,
                      std::function<void(bool)> done) {
  if (g.active.empty()) {
    done(true);
    return;
  }
  if (async_ == nullptr || !async_->ready()) {
    done(false);
    return;
  }
  auto* batch = new Batch;
  batch->store = this;
  batch->geometry = &g;
  batch->resources.reserve(g.active.size());
  for (const auto& [resource, last] : g.active) batch->resources.push_back(resource);
  batch->epochs = std::move(epochs);
  batch->counts.assign(batch->resources.size() * batch->epochs.size(), 0);
  batch->slots.resize(batch->resources.size());
  batch->remaining = batch->resources.size();
  batch->started_ns = steady_ns();
  batch->done = std::move(done);
  g.reading = true;

  // Every command differs only in the resource's 16 hex digits: format one and patch it.
  const std::string key =
      layout_.head() + std::string(16, '0') + KeyLayout::tail(g.resolution_ms, g.subintervals);
  std::string command = "*" + std::to_string(2 + batch->epochs.size()) + "\r\n$5\r\nHMGET\r\n$" +
                        std::to_string(key.size()) + "\r\n";
  const std::size_t hex_at = command.size() + layout_.head().size();
  command += key + "\r\n";
  for (const std::int64_t x : batch->epochs) {
    const std::string f = std::to_string(KeyLayout::field(x, g.subintervals));
    command += "$" + std::to_string(f.size()) + "\r\n" + f + "\r\n";
  }
  for (std::size_t i = 0; i < batch->resources.size(); ++i) {
    batch->slots[i] = {batch, i};
    KeyLayout::hex16(command.data() + hex_at, batch->resources[i]);
    if (i % 16384 == 16383) async_->flush();  // let Redis start on what is queued
    if (!async_->command_formatted(command, &batch->slots[i])) {
      // Not connected any more: the rest fail at once.
      batch->ok = false;
      batch->remaining -= batch->resources.size() - i;
      if (batch->remaining == 0) batch->finish();
      return;
    }
  }
  async_->flush();
}

void RedisStore::Batch::finish() {
  const std::size_t width = epochs.size();
  std::vector<EpochCount> window(width);
  for (std::size_t i = 0; i < resources.size(); ++i) {
    for (std::size_t j = 0; j < width; ++j) window[j] = {epochs[j], counts[i * width + j]};
    store->target_.merge({resources[i], geometry->resolution_ms, geometry->subintervals}, window);
  }
  const std::int64_t took = steady_ns() - started_ns;
  (ok ? store->sync_rounds_ : store->sync_failures_).fetch_add(1, std::memory_order_relaxed);
  store->sync_last_keys_.store(resources.size(), std::memory_order_relaxed);
  store->sync_last_ns_.store(took, std::memory_order_relaxed);
  if (took > store->sync_max_ns_.load(std::memory_order_relaxed)) {
    store->sync_max_ns_.store(took, std::memory_order_relaxed);
  }
  if (key_errors > 0) {
    store->note_error("boundary read: " + std::to_string(key_errors) +
                      " keys could not be read as counts (written by something else?)");
  }
  geometry->reading = false;
  done(ok);
  delete this;
}

bool RedisStore::sync_now() {
  auto result = std::make_shared<std::promise<bool>>();
  std::future<bool> future = result->get_future();
  const bool posted = loop_.post([this, result] {
    // Take in recent activity as a tick does, without moving its boundaries.
    const std::int64_t now = aligned_now();
    absorb_activity(now);
    auto pending = std::make_shared<std::size_t>(geometries_.size() + 1);
    auto all_ok = std::make_shared<bool>(available());
    auto one_done = [result, pending, all_ok](bool ok) {
      *all_ok = *all_ok && ok;
      if (--*pending == 0) result->set_value(*all_ok);
    };
    for (auto& [id, g] : geometries_) {
      const std::int64_t e = SlidingWindow::epoch_of(now, g.resolution_ns());
      std::vector<std::int64_t> epochs;
      for (std::int64_t x = e - std::int64_t{g.subintervals}; x <= e; ++x) epochs.push_back(x);
      read(g, std::move(epochs), one_done);
    }
    one_done(true);
  });
  if (!posted) return false;
  if (future.wait_for(options_.connect_timeout + options_.command_timeout * 10) !=
      std::future_status::ready) {
    return false;
  }
  return future.get();
}

}  // namespace ratewin::inline v1::detail
