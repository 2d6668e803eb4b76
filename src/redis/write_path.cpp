#include "redis/write_path.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <vector>

namespace ratewin::inline v1::detail {
namespace {

using std::chrono::nanoseconds;
using Deadline = RedisConnection::Deadline;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sends `commands` as one pipeline; `on_reply(index, reply)` for each reply.
bool run(RedisConnection& connection, const std::vector<Command>& commands,
         const RedisConnection::ReplyFn& on_reply, Deadline deadline, std::string& error) {
  std::vector<RedisConnection::Argv> argv;
  argv.reserve(commands.size());
  for (const Command& c : commands) argv.emplace_back(c.begin(), c.end());
  return connection.round_trip(argv, on_reply, deadline, error);
}

// The integers of a BITFIELD reply (nil: an operation that OVERFLOW FAIL skipped).
struct BitfieldReply {
  std::array<std::int64_t, 4> values{};
  std::array<bool, 4> present{};
  std::size_t size = 0;
  bool read(const redisReply& r) {
    if (r.type != REDIS_REPLY_ARRAY || r.elements > values.size()) return false;
    size = r.elements;
    for (std::size_t i = 0; i < size; ++i) {
      const redisReply* e = r.element[i];
      present[i] = e->type == REDIS_REPLY_INTEGER;
      values[i] = present[i] ? e->integer : 0;
      if (!present[i] && e->type != REDIS_REPLY_NIL) return false;
    }
    return true;
  }
};

}  // namespace

// What one call learned from Redis.
struct WritePath::Call {
  bool unavailable = false;  // Redis said it cannot serve (READONLY, LOADING, ...)
  std::string refused;       // another error reply
  BitfieldReply bitfield;
  std::string window;  // the window string read back (empty: no key)
  bool window_read = false;

  void take(const redisReply& r) {
    if (r.type == REDIS_REPLY_ERROR) {
      if (server_unavailable(r)) unavailable = true;
      if (refused.empty()) refused = reply_text(r);
    }
  }
};

RedisPool::Lease WritePath::lease(Deadline& deadline, bool count) {
  if (!circuit_.available()) {
    if (count) writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  std::string error;
  RedisPool::Failure failure{};
  RedisPool::Lease lease = pool_.acquire(deadline, failure, error);
  if (!lease) {
    if (count) writes_failed_.fetch_add(1, std::memory_order_relaxed);
    reporter_.note_error("write: " + error);
    // Busy connections say nothing about Redis' health.
    if (failure == RedisPool::Failure::kConnect) circuit_.open("write: " + error);
    return {};
  }
  if (lease.fresh()) {
    // Opening the connection took up to the connect timeout: the round trip still gets
    // its own.
    deadline = std::max(deadline, std::chrono::steady_clock::now() + options_.command_timeout);
  }
  if (!circuit_.available()) {  // the circuit opened while this call waited
    if (count) writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  return lease;
}

bool WritePath::add(const StoreWrite& write, std::span<std::uint64_t> counts) {
  const bool counted = write.cost != 0;  // a question (cost 0) only reads
  const std::int64_t started = steady_ns();
  Deadline deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  RedisPool::Lease connection = lease(deadline, counted);
  if (!connection) return false;

  std::atomic<std::uint64_t>& expiry = change_set_expiry(write);
  const bool expire_change_set =
      write.first && counted && expiry.load(std::memory_order_relaxed) != change_set_id(write);
  const std::vector<Command> commands = layout_.write_commands(
      {write.key, write.epoch, write.cost, write.first && counted, expire_change_set});
  const std::size_t window_reply = counted ? 1 : 0;
  Call call;
  std::string error;
  const bool sent = run(
      *connection, commands,
      [&](std::size_t i, const redisReply& r) {
        call.take(r);
        if (counted && i == 0 && r.type != REDIS_REPLY_ERROR && !call.bitfield.read(r)) {
          call.refused = "unexpected BITFIELD reply: " + reply_text(r);
        }
        if (i == window_reply && (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_NIL)) {
          call.window_read = true;
          if (r.type == REDIS_REPLY_STRING) call.window.assign(r.str, r.len);
        }
      },
      deadline, error);
  if (!sent || call.unavailable) {
    // A server that cannot serve (a replica after a failover, loading, busy) is as good
    // as unreachable: drop the connection, open the circuit; reconnecting finds out more.
    if (call.unavailable) {
      connection->discard();
      error = "Redis cannot serve: " + call.refused;
    }
    if (counted) writes_failed_.fetch_add(1, std::memory_order_relaxed);
    reporter_.note_error("write: " + error);
    circuit_.open("write: " + error);
    return false;
  }
  const std::size_t expected = write.first && counted ? 4 : counted ? 1 : 0;
  if (!call.refused.empty() || !call.window_read || call.bitfield.size != expected) {
    if (counted) writes_failed_.fetch_add(1, std::memory_order_relaxed);
    reporter_.note_error("write refused by Redis: " +
                         (call.refused.empty() ? std::string("unexpected reply") : call.refused));
    return false;
  }
  StoreLayout::decode(call.window, write.epoch, write.key.subintervals, counts);
  if (!counted) return true;

  const std::int64_t e = write.epoch;
  const std::uint16_t tag = StoreLayout::tag_of(e);
  std::string repair_error;
  bool repaired = true;
  if (write.first) {
    // [old value of the slot of e + 2, old tag of e's slot, the ring's last byte (its size
    // set), e's count after this write]
    const auto cleared = static_cast<std::uint64_t>(call.bitfield.values[0]);
    const auto old_tag = static_cast<std::uint16_t>(call.bitfield.values[1]);
    const auto count = static_cast<std::uint64_t>(call.bitfield.values[3]);
    if (old_tag != 0 && old_tag != tag) {
      if (StoreLayout::epoch_of_tag(old_tag, e) > e) {
        // The slot already counts a later epoch: this write is far behind the shared
        // clock (M epochs or more). Put the slot back and count nothing here.
        repaired = run(
            *connection,
            {layout_.adjust_command(write.key, e, -static_cast<std::int64_t>(write.cost), old_tag)},
            [](std::size_t, const redisReply&) {}, deadline, repair_error);
        writes_failed_.fetch_add(1, std::memory_order_relaxed);
        reporter_.note_error("write: epoch " + std::to_string(e) +
                             " is behind the shared window by a whole ring");
        return false;
      }
      // This write tagged a slot that still held an old epoch's count (no first write
      // cleared it in e - 2): it alone knows that count, and takes it back.
      const std::uint64_t stale = count > write.cost ? count - write.cost : 0;
      if (stale > 0) {
        repairs_.fetch_add(1, std::memory_order_relaxed);
        counts[0] -= std::min(counts[0], stale);
        repaired = take_back(*connection, write.key, e, stale, deadline, repair_error);
      }
    }
    const auto cleared_tag = static_cast<std::uint16_t>(cleared >> 32);
    const auto cleared_count = static_cast<std::uint32_t>(cleared & 0xffffffffU);
    if (repaired && cleared_tag != 0 && cleared_count != 0 &&
        StoreLayout::epoch_of_tag(cleared_tag, e + 2) >= e + 2) {
      // This write reached Redis so late that the slot it cleared was already counting
      // (epoch e + 2 or later): put the count back.
      repairs_.fetch_add(1, std::memory_order_relaxed);
      repaired = run(
          *connection,
          {layout_.adjust_command(write.key, StoreLayout::epoch_of_tag(cleared_tag, e + 2),
                                  cleared_count,
                                  cleared_tag == StoreLayout::tag_of(e + 2) ? 0 : cleared_tag)},
          [](std::size_t, const redisReply&) {}, deadline, repair_error);
    }
    if (repaired) expiry.store(change_set_id(write), std::memory_order_relaxed);
  } else if (StoreLayout::slot_value(call.window, e, write.key.subintervals).first != tag) {
    // The slot was not tagged for e although this node's first write in e tagged it: the
    // key was deleted or expired since and made again by this write. Tag it, keeping
    // what was counted since.
    repairs_.fetch_add(1, std::memory_order_relaxed);
    counts[0] = StoreLayout::slot_value(call.window, e, write.key.subintervals).second;
    repaired = run(
        *connection, {layout_.adjust_command(write.key, e, 0, tag)},
        [](std::size_t, const redisReply&) {}, deadline, repair_error);
  }
  if (!repaired) reporter_.note_error("write: correcting the shared window: " + repair_error);
  writes_ok_.fetch_add(1, std::memory_order_relaxed);
  latency_.record(nanoseconds(steady_ns() - started));
  return true;
}

bool WritePath::take_back(RedisConnection& connection, const LimiterKey& key, std::int64_t epoch,
                          std::uint64_t amount, Deadline deadline, std::string& error) {
  BitfieldReply reply;
  std::string refused;
  if (!run(
          connection, {layout_.give_back_command(key, epoch, amount)},
          [&](std::size_t, const redisReply& r) {
            if (r.type == REDIS_REPLY_ERROR) refused = reply_text(r);
            if (!reply.read(r) && refused.empty()) refused = "unexpected reply";
          },
          deadline, error)) {
    return false;
  }
  if (!refused.empty()) {
    error = refused;
    return false;
  }
  // [the slot's tag, its count after the decrement or nil if it held less than `amount`]
  if (reply.size == 2 && reply.present[1] &&
      static_cast<std::uint16_t>(reply.values[0]) != StoreLayout::tag_of(epoch)) {
    // The slot had moved on to another epoch: what was taken was not this epoch's.
    return run(
        connection, {layout_.adjust_command(key, epoch, static_cast<std::int64_t>(amount))},
        [](std::size_t, const redisReply&) {}, deadline, error);
  }
  return true;
}

void WritePath::remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost) {
  Deadline deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  RedisPool::Lease connection = lease(deadline, false);
  if (!connection) return;
  std::string error;
  // Not fatal if it fails: the count stays (the shared estimate errs on the safe side)
  // and leaves the window with its subinterval.
  if (!take_back(*connection, key, epoch, cost, deadline, error)) {
    reporter_.note_error("giving back a count: " + error);
  }
}

std::uint64_t WritePath::change_set_id(const StoreWrite& write) noexcept {
  const unsigned shard = StoreLayout::change_set_shard(write.key.resource);
  std::uint64_t x = (static_cast<std::uint64_t>(write.epoch) * 0x9e3779b97f4a7c15ULL) ^
                    (std::uint64_t{write.key.resolution_ms} << 32) ^
                    (std::uint64_t{write.key.subintervals} << 8) ^ shard;
  x ^= x >> 31;
  return x | 1;  // never 0, the table's empty value
}

std::atomic<std::uint64_t>& WritePath::change_set_expiry(const StoreWrite& write) noexcept {
  const unsigned shard = StoreLayout::change_set_shard(write.key.resource);
  const std::uint64_t geometry =
      (std::uint64_t{write.key.resolution_ms} << 16) ^ write.key.subintervals;
  return change_set_expiry_[(geometry * 0x9e3779b97f4a7c15ULL + shard) % change_set_expiry_.size()];
}

void WritePath::add_stats(Stats& s) const {
  s.writes_ok = writes_ok_.load(std::memory_order_relaxed);
  s.writes_failed = writes_failed_.load(std::memory_order_relaxed);
  s.writes_skipped = writes_skipped_.load(std::memory_order_relaxed);
  s.write_p50 = latency_.quantile(0.5);
  s.write_p90 = latency_.quantile(0.9);
  s.write_p99 = latency_.quantile(0.99);
  s.write_max = latency_.max();
}

}  // namespace ratewin::inline v1::detail
