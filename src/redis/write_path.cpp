#include "redis/write_path.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <vector>

#include "redis/steady_ns.h"

namespace ratewin::inline v1::detail {
namespace {

using std::chrono::nanoseconds;
using Deadline = RedisConnection::Deadline;

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

void WriteReplies::take(const StoreWrite& write, std::size_t i, const redisReply& r) {
  if (r.type == REDIS_REPLY_ERROR) {
    if (server_unavailable(r)) unavailable = true;
    if (refused.empty()) refused = reply_text(r);
  }
  if (!write.key.ring()) {
    // A bucket's integer, a log's array of four.
    script_read = false;
    if (r.type == REDIS_REPLY_INTEGER) {  // (a bucket's, or a log's count)
      script[0] = r.integer;
      script_size = 1;
      script_read = true;
    } else if (write.key.log() && r.type == REDIS_REPLY_ARRAY && r.elements == script.size()) {
      script_read = true;
      for (std::size_t k = 0; k < r.elements; ++k) {
        script_read = script_read && r.element[k]->type == REDIS_REPLY_INTEGER;
        script[k] = script_read ? r.element[k]->integer : 0;
      }
      script_size = r.elements;
    }
    if (!script_read && refused.empty()) refused = "unexpected reply: " + reply_text(r);
    return;
  }
  const bool counted = write.cost != 0;
  if (counted && i == 0 && r.type != REDIS_REPLY_ERROR) {
    BitfieldReply b;
    if (b.read(r)) {
      bitfield = b.values;
      present = b.present;
      bitfield_size = b.size;
    } else {
      refused = "unexpected BITFIELD reply: " + reply_text(r);
    }
  }
  if (i == (counted ? 1U : 0U) && (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_NIL)) {
    window_read = true;
    if (r.type == REDIS_REPLY_STRING) window.assign(r.str, r.len);
  }
}

// One parallel round trip: the commands grouped by the node that serves their slot, each
// group sent on a connection of its node before any reply is read. A redirected command
// is sent again to the node named (after ASKING for an ASK), at most kRounds times in
// all. on_reply(i, reply) runs once for each command that got its final reply.
struct WritePath::Exchange {
  static constexpr int kRounds = 4;
  using End = CommandEnd;
  struct Item {
    RedisNode* node;
    bool asking = false;
    End end = End::kPending;
  };
  WritePath& path;
  Deadline deadline;
  std::vector<Item> items;
  std::string error;  // the first failure

  Exchange(WritePath& p, std::size_t count)
      : path(p), deadline(std::chrono::steady_clock::now() + p.options_.command_timeout) {
    items.reserve(count);
  }

  void fail(RedisNode& node, std::span<const std::size_t> which, End end, std::string why,
            bool open) {
    for (const std::size_t i : which) items[i].end = end;
    if (open) node.circuit().open("write: " + why);
    if (error.empty()) error = std::move(why);
  }

  // A command that Redis asks to send differently (StoreLayout::load_instead) is changed
  // in `commands`.
  void run(std::vector<Command>& commands, const RedisConnection::ReplyFn& on_reply) {
    struct Leg {
      RedisNode* node;
      std::vector<std::size_t> which;
      std::vector<RedisConnection::Argv> argv;
      RedisPool::Lease lease;
    };
    std::vector<Leg> legs;
    for (int round = 0; round < kRounds; ++round) {
      legs.clear();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (items[i].end != End::kPending) continue;
        auto leg = std::find_if(legs.begin(), legs.end(),
                                [&](const Leg& l) { return l.node == items[i].node; });
        if (leg == legs.end()) leg = legs.insert(legs.end(), Leg{items[i].node, {}, {}, {}});
        leg->which.push_back(i);
        if (items[i].asking) leg->argv.push_back({"ASKING"});
        leg->argv.emplace_back(commands[i].begin(), commands[i].end());
      }
      if (legs.empty()) return;
      for (Leg& leg : legs) {
        RedisNode& node = *leg.node;
        if (!node.circuit().available()) {
          fail(node, leg.which, End::kSkipped, node.name() + " unavailable", false);
          continue;
        }
        std::string why;
        RedisPool::Failure failure{};
        leg.lease = node.pool().acquire(deadline, failure, why);
        if (!leg.lease) {
          // Busy connections say nothing about Redis' health.
          fail(node, leg.which, End::kFailed, why, failure == RedisPool::Failure::kConnect);
          continue;
        }
        if (!node.circuit().available()) {
          // The circuit opened while this call waited for a connection: no round trip.
          leg.lease.reset();
          fail(node, leg.which, End::kSkipped, node.name() + " unavailable", false);
          continue;
        }
        if (leg.lease.fresh()) {
          // Opening the connection took up to the connect timeout: the round trip still
          // gets its own.
          deadline =
              std::max(deadline, std::chrono::steady_clock::now() + path.options_.command_timeout);
        }
        if (!leg.lease->send(leg.argv, deadline, why)) {
          fail(node, leg.which, End::kFailed, why, true);
          leg.lease.reset();
        }
      }
      for (Leg& leg : legs) {
        if (!leg.lease) continue;
        RedisNode& node = *leg.node;
        std::size_t next = 0;  // the item whose reply comes next
        bool asked = false;    // its ASKING has been answered
        std::string unavailable;
        std::string why;
        const bool received = leg.lease->receive(
            leg.argv.size(),
            [&](std::size_t, const redisReply& r) {
              Item& item = items[leg.which[next]];
              if (item.asking && !asked) {
                asked = true;
                return;
              }
              asked = false;
              const std::size_t index = leg.which[next++];
              if (const Topology::Redirect to = path.topology_.redirect(r, node); to.node) {
                item.node = to.node;
                item.asking = to.ask;
                return;  // pending: sent again in the next round
              }
              item.asking = false;
              if (r.type == REDIS_REPLY_ERROR &&
                  StoreLayout::load_instead(commands[index], std::string_view(r.str, r.len))) {
                return;  // pending: sent again, as the script's text, in the next round
              }
              if (server_unavailable(r)) {
                if (unavailable.empty()) unavailable = reply_text(r);
                item.end = End::kFailed;
                return;
              }
              item.end = End::kAnswered;
              on_reply(index, r);
            },
            deadline, why);
        if (!received) {
          for (const std::size_t i : leg.which)
            if (items[i].end == End::kPending && items[i].node == &node)
              items[i].end = End::kFailed;
          fail(node, {}, End::kFailed, node.name() + ": " + why, true);
        } else if (!unavailable.empty()) {
          // A server that cannot serve (a replica after a failover, loading, a cluster
          // that is down) is as good as unreachable: drop the connection, open the
          // circuit; reconnecting (and reading the slot map again) finds out more.
          leg.lease->discard();
          path.topology_.want_refresh();
          fail(node, {}, End::kFailed, "Redis at " + node.name() + " cannot serve: " + unavailable,
               true);
        }
        leg.lease.reset();
      }
    }
    for (Item& item : items) {
      if (item.end != End::kPending) continue;
      item.end = End::kFailed;
      if (error.empty()) error = "redirected too many times";
    }
  }
};

bool WritePath::add(const StoreWrite& write, std::span<std::uint64_t> counts) {
  bool written = false;
  add_all(std::span<const StoreWrite>(&write, 1),
          std::span<const std::span<std::uint64_t>>(&counts, 1), std::span<bool>(&written, 1));
  return written;
}

bool WritePath::plan(const StoreWrite& w, WritePlan& out) {
  const bool counted = w.cost != 0;
  RedisNode& home = topology_.node_for_resource(w.key.resource);
  if (!home.circuit().available()) {
    if (counted) writes_skipped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (!w.key.ring()) {
    out.commands = {layout_.script_command(w, false)};
    out.home = &home;
    out.sets = &home;
    return true;
  }
  out.commands = layout_.write_commands({w.key, w.epoch, w.cost, w.first && counted});
  out.home = &home;
  out.sets = out.commands.size() > 2 ? &topology_.node_for_slot(StoreLayout::change_set_slot(
                                           StoreLayout::change_set_shard(w.key.resource)))
                                     : &home;
  return true;
}

void WritePath::add_all(std::span<const StoreWrite> writes,
                        std::span<const std::span<std::uint64_t>> counts, std::span<bool> written) {
  const std::int64_t started = steady_ns();
  // Every write's commands in one exchange: each to the node of its slot, all nodes at
  // once.
  struct Part {
    std::size_t first = 0;  // its commands in `all`
    std::size_t size = 0;
    WriteReplies replies;
  };
  std::vector<Part> parts(writes.size());
  std::vector<Command> all;
  std::vector<std::size_t> owner;  // per command: its write
  Exchange x(*this, writes.size() * 4);
  WritePlan plan_of;
  for (std::size_t j = 0; j < writes.size(); ++j) {
    written[j] = false;
    if (!plan(writes[j], plan_of)) continue;
    parts[j].first = all.size();
    parts[j].size = plan_of.commands.size();
    for (std::size_t i = 0; i < plan_of.commands.size(); ++i) {
      x.items.push_back({&plan_of.node(i)});
      owner.push_back(j);
      all.push_back(std::move(plan_of.commands[i]));
    }
  }
  if (all.empty()) return;
  x.run(all, [&](std::size_t index, const redisReply& r) {
    const std::size_t j = owner[index];
    parts[j].replies.take(writes[j], index - parts[j].first, r);
  });
  std::vector<CommandEnd> ends;
  std::vector<Command> repair;
  for (std::size_t j = 0; j < writes.size(); ++j) {
    if (parts[j].size == 0) continue;  // skipped: its node is down
    ends.clear();
    for (std::size_t i = 0; i < parts[j].size; ++i) ends.push_back(x.items[parts[j].first + i].end);
    repair.clear();
    written[j] = conclude(writes[j], parts[j].replies, ends, x.error, counts[j], started, repair);
    if (repair.empty()) continue;
    Exchange fix(*this, repair.size());
    fix.deadline = x.deadline;
    fix.items.assign(repair.size(), {x.items[parts[j].first].node});
    fix.run(repair, [](std::size_t, const redisReply&) {});
    if (!fix.error.empty()) {
      reporter_.note_error("write: tagging the shared window's slot: " + fix.error);
    }
  }
}

bool WritePath::conclude(const StoreWrite& write, const WriteReplies& call,
                         std::span<const CommandEnd> items, const std::string& error,
                         std::span<std::uint64_t> counts, std::int64_t started,
                         std::vector<Command>& repair) {
  const bool counted = write.cost != 0;
  if (!write.key.ring()) return conclude_script(write, call, items[0], error, counts, started);
  const std::size_t window_reply = counted ? 1 : 0;
  for (std::size_t i = 0; i <= window_reply; ++i) {
    if (items[i] == CommandEnd::kAnswered) continue;
    if (counted) {
      (items[i] == CommandEnd::kSkipped ? writes_skipped_ : writes_failed_)
          .fetch_add(1, std::memory_order_relaxed);
    }
    reporter_.note_error("write: " + error);
    return false;
  }
  for (std::size_t i = window_reply + 1; i < items.size(); ++i) {
    if (items[i] == CommandEnd::kAnswered) continue;
    // The window was written but its change set was not: other nodes' boundary reads
    // miss this write (their own writes still read it).
    reporter_.note_error("write: recording a change: " + error);
    break;
  }
  const std::size_t expected = write.first && counted ? 4 : counted ? 1 : 0;
  if (!call.refused.empty() || !call.window_read || call.bitfield_size != expected) {
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
  const auto found = write.first ? static_cast<std::uint16_t>(call.bitfield[1] >> 32)
                                 : StoreLayout::slot_value(call.window, e, n).first;
  if (found != tag && StoreLayout::earlier(found, tag)) {
    // Not e's slot, and not a later lap's: the tag wrapped (a claim cannot lift 65535 to
    // 1), or the key was deleted or expired since this node's first write in e and made
    // again by this one. Tag it, keeping what it counts (for one epoch, perhaps an old
    // lap's count too: it errs high).
    repairs_.fetch_add(1, std::memory_order_relaxed);
    counts[0] = StoreLayout::slot_value(call.window, e, n).second;
    repair = layout_.adjust_commands(write.key, e, 0, tag);
  }
  // (A later lap's tag: this write reached Redis a whole ring late, and counted in that
  // lap's epoch. The count errs high; e's decoded count is 0.)
  writes_ok_.fetch_add(1, std::memory_order_relaxed);
  latency_.record(nanoseconds(steady_ns() - started));
  return true;
}

bool WritePath::conclude_script(const StoreWrite& write, const WriteReplies& call, CommandEnd end,
                                const std::string& error, std::span<std::uint64_t> counts,
                                std::int64_t started) {
  const bool counted = write.cost != 0;
  if (end != CommandEnd::kAnswered) {
    if (counted) {
      (end == CommandEnd::kSkipped ? writes_skipped_ : writes_failed_)
          .fetch_add(1, std::memory_order_relaxed);
    }
    reporter_.note_error("write: " + error);
    return false;
  }
  if (!call.refused.empty() || !call.script_read) {
    if (counted) writes_failed_.fetch_add(1, std::memory_order_relaxed);
    reporter_.note_error("write refused by Redis: " +
                         (call.refused.empty() ? std::string("unexpected reply") : call.refused));
    return false;
  }
  bool admitted = false;
  if (write.key.bucket()) {
    StoreLayout::bucket_reply(call.script[0], counts);
    admitted = call.script[0] >= 0;
  } else {
    StoreLayout::log_reply(std::span<const long long>(call.script.data(), call.script_size),
                           write.epoch, counts);
    admitted = call.script[0] != 0;
  }
  if (counted && admitted) writes_ok_.fetch_add(1, std::memory_order_relaxed);
  latency_.record(nanoseconds(steady_ns() - started));
  return true;
}

std::vector<Command> WritePath::give_back_repair(const LimiterKey& key, std::int64_t epoch,
                                                 std::uint64_t cost, const redisReply& r) {
  BitfieldReply reply;
  if (!reply.read(r) || reply.size != 2 || !reply.present[1] ||
      static_cast<std::uint16_t>(reply.values[0]) == StoreLayout::tag_of(epoch, key.subintervals))
    return {};
  // [the slot's tag, its count after the decrement, or nil if it held less than `cost`]
  // The slot had moved on to another epoch (the give-back came a whole ring late): what
  // was taken was not this epoch's. Put it back (that other epoch reads low meanwhile).
  repairs_.fetch_add(1, std::memory_order_relaxed);
  return layout_.adjust_commands(key, epoch, static_cast<std::int64_t>(cost));
}

void WritePath::remove(const StoreWrite& give_back) {
  const LimiterKey& key = give_back.key;
  const std::int64_t epoch = give_back.epoch;
  const std::uint64_t cost = give_back.cost;
  RedisNode& home = topology_.node_for_resource(key.resource);
  if (!home.circuit().available()) {
    reporter_.note_error("giving back a count: Redis unavailable");
    return;
  }
  if (!key.ring()) {
    std::vector<Command> commands = {layout_.script_command(give_back, true)};
    Exchange x(*this, 1);
    x.items.assign(1, {&home});
    std::string refused;
    x.run(commands, [&](std::size_t, const redisReply& r) {
      if (r.type == REDIS_REPLY_ERROR) refused = reply_text(r);
    });
    if (x.items[0].end != Exchange::End::kAnswered || !refused.empty())
      reporter_.note_error("giving back a count: " + (refused.empty() ? x.error : refused));
    return;
  }
  // Not fatal if it fails: the count stays (the shared estimate errs on the safe side)
  // and leaves the window with its subinterval.
  std::vector<Command> commands = layout_.give_back_commands(key, epoch, cost);
  Exchange x(*this, commands.size());
  x.items.assign(commands.size(), {&home});
  std::vector<Command> repair;
  std::string refused;
  x.run(commands, [&](std::size_t i, const redisReply& r) {
    if (r.type == REDIS_REPLY_ERROR && refused.empty()) refused = reply_text(r);
    if (i == 0 && r.type != REDIS_REPLY_ERROR) repair = give_back_repair(key, epoch, cost, r);
  });
  bool ok = x.items[0].end == Exchange::End::kAnswered;
  if (ok && !repair.empty()) {
    Exchange fix(*this, repair.size());
    fix.deadline = x.deadline;
    fix.items.assign(repair.size(), {x.items[0].node});
    fix.run(repair, [](std::size_t, const redisReply&) {});
    ok = fix.items[0].end == Exchange::End::kAnswered;
    if (!ok) x.error = fix.error;
  }
  if (!ok || !refused.empty()) {
    reporter_.note_error("giving back a count: " + (refused.empty() ? x.error : refused));
  }
}

bool WritePath::reset(const LimiterKey& key) {
  RedisNode& home = topology_.node_for_resource(key.resource);
  if (!home.circuit().available()) {
    reporter_.note_error("resetting counts: Redis unavailable");
    return false;
  }
  std::vector<Command> commands = {{"DEL", layout_.window_key(key)}};
  Exchange x(*this, commands.size());
  x.items.assign(commands.size(), {&home});
  std::string refused;
  x.run(commands, [&](std::size_t, const redisReply& r) {
    if (r.type == REDIS_REPLY_ERROR) refused = reply_text(r);
  });
  const bool ok = x.items[0].end == Exchange::End::kAnswered && refused.empty();
  if (!ok) reporter_.note_error("resetting counts: " + (refused.empty() ? x.error : refused));
  return ok;
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
