#include "redis/write_path.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <vector>

#include "redis/steady_ns.h"

namespace ratewin::inline v1::detail {
namespace {

using std::chrono::nanoseconds;
using Deadline = RedisConnection::Deadline;

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

  const std::vector<Command> commands =
      layout_.write_commands({write.key, write.epoch, write.cost, write.first && counted});
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
  const std::uint32_t n = write.key.subintervals;
  const std::uint16_t tag = StoreLayout::tag_of(e, n);
  // The tag e's slot has now (a first write's BITFIELD answers [the slot after the first
  // half of the claim, after the claim, the ring's last byte, e's count]; a later write's,
  // [e's count], and its GETEX the window).
  const auto found = write.first ? static_cast<std::uint16_t>(call.bitfield.values[1] >> 32)
                                 : StoreLayout::slot_value(call.window, e, n).first;
  if (found != tag && StoreLayout::earlier(found, tag)) {
    // Not e's slot, and not a later lap's: the tag wrapped (a claim cannot lift 65535 to
    // 1), or the key was deleted or expired since this node's first write in e and made
    // again by this one. Tag it, keeping what it counts (for one epoch, perhaps an old
    // lap's count too: it errs high).
    repairs_.fetch_add(1, std::memory_order_relaxed);
    counts[0] = StoreLayout::slot_value(call.window, e, n).second;
    std::string repair_error;
    if (!run(
            *connection, layout_.adjust_commands(write.key, e, 0, tag),
            [](std::size_t, const redisReply&) {}, deadline, repair_error)) {
      reporter_.note_error("write: tagging the shared window's slot: " + repair_error);
    }
  }
  // (A later lap's tag: this write reached Redis a whole ring late, and counted in that
  // lap's epoch. The count errs high; e's decoded count is 0.)
  writes_ok_.fetch_add(1, std::memory_order_relaxed);
  latency_.record(nanoseconds(steady_ns() - started));
  return true;
}

void WritePath::remove(const LimiterKey& key, std::int64_t epoch, std::uint64_t cost) {
  Deadline deadline = std::chrono::steady_clock::now() + options_.command_timeout;
  RedisPool::Lease connection = lease(deadline, false);
  if (!connection) {
    reporter_.note_error("giving back a count: Redis unavailable");
    return;
  }
  // Not fatal if it fails: the count stays (the shared estimate errs on the safe side)
  // and leaves the window with its subinterval.
  std::string error;
  BitfieldReply reply;
  std::string refused;
  bool ok = run(
      *connection, layout_.give_back_commands(key, epoch, cost),
      [&](std::size_t i, const redisReply& r) {
        if (r.type == REDIS_REPLY_ERROR && refused.empty()) refused = reply_text(r);
        if (i == 0 && !reply.read(r) && refused.empty()) refused = "unexpected reply";
      },
      deadline, error);
  if (ok && refused.empty() && reply.size == 2 && reply.present[1] &&
      static_cast<std::uint16_t>(reply.values[0]) != StoreLayout::tag_of(epoch, key.subintervals)) {
    // [the slot's tag, its count after the decrement, or nil if it held less than `cost`]
    // The slot had moved on to another epoch (the give-back came a whole ring late): what
    // was taken was not this epoch's. Put it back (that other epoch reads low meanwhile).
    repairs_.fetch_add(1, std::memory_order_relaxed);
    ok = run(
        *connection, layout_.adjust_commands(key, epoch, static_cast<std::int64_t>(cost)),
        [](std::size_t, const redisReply&) {}, deadline, error);
  }
  if (!ok || !refused.empty()) {
    reporter_.note_error("giving back a count: " + (refused.empty() ? error : refused));
  }
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
