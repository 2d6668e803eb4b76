#include "redis/write_path.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/scratch.h"
#include "redis/steady_ns.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

using std::chrono::nanoseconds;
using Deadline = RedisConnection::Deadline;

// Sends of one command at most (its first, then redirections and a script's reload).
constexpr int kMostSends = 4;

// The integers of a BITFIELD reply (nil: an operation that OVERFLOW FAIL skipped).
struct BitfieldReply {
  std::array<std::int64_t, 8> values{};
  std::array<bool, 8> present{};
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

// The RESP of this thread's calls, reused from call to call so that a steady call
// allocates nothing: a stack of writers, for a call made while another is under way (a
// correction after a write).
class PlanStack {
 public:
  RespWriter& take() {
    if (depth_ == writers_.size()) writers_.push_back(std::make_unique<RespWriter>());
    RespWriter& w = *writers_[depth_++];
    w.clear();
    return w;
  }
  void give_back() noexcept { --depth_; }

 private:
  std::vector<std::unique_ptr<RespWriter>> writers_;
  std::size_t depth_ = 0;
};
thread_local PlanStack plans;

// One of this thread's writers, for one call.
class Plan {
 public:
  Plan() : writer_(plans.take()) {}
  ~Plan() { plans.give_back(); }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  RespWriter& operator*() noexcept { return writer_; }
  RespWriter* operator->() noexcept { return &writer_; }

 private:
  RespWriter& writer_;
};

}  // namespace

void WriteReplies::take(const StoreWrite& write, std::size_t i, const redisReply& r,
                        std::span<std::uint64_t> counts) {
  if (r.type == REDIS_REPLY_ERROR && refused.ok()) refused = status_of(r);
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
    if (!script_read && refused.ok())
      refused = Status(Status::Code::protocol, "unexpected reply: " + reply_text(r));
    return;
  }
  const bool counted = write.cost != 0;
  if (counted && i == 0 && r.type != REDIS_REPLY_ERROR) {
    BitfieldReply b;
    if (b.read(r)) {
      bitfield = b.values;
      present = b.present;
      bitfield_size = b.size;
    } else if (refused.ok()) {
      refused = Status(Status::Code::protocol, "unexpected BITFIELD reply: " + reply_text(r));
    }
  }
  if (i == (counted ? 1U : 0U) && (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_NIL)) {
    window_read = true;
    const std::string_view value =
        r.type == REDIS_REPLY_STRING ? std::string_view(r.str, r.len) : std::string_view();
    StoreLayout::decode(value, write.epoch, write.key.subintervals, RingReply::window(counts));
    counts.back() = StoreLayout::next_count(value, write.epoch, write.key.subintervals);
    slot = StoreLayout::slot_value(value, write.epoch, write.key.subintervals);
  }
}

CommandEnd WritePath::route(const redisReply& reply, CommandState& state, RespWriter& out,
                            std::span<const StoreWrite> writes, Status& failure) {
  const Status status = status_of(reply);
  RedisNode& from = *state.node;
  switch (status.code()) {
    case Status::Code::redirect: {
      const Topology::Redirect to = topology_.redirect(reply, from);
      if (to.node == nullptr) break;  // (not one that can be followed: an error reply)
      if (state.sends >= kMostSends) {
        failure = Status(Status::Code::io, "redirected too many times");
        return CommandEnd::kFailed;
      }
      state.node = to.node;
      state.asking = to.ask;
      return CommandEnd::kPending;
    }
    case Status::Code::noscript: {
      const StoreWrite& write = writes[state.write];
      if (write.key.ring()) break;
      if (state.sends >= kMostSends) {
        failure = Status(Status::Code::io, "NOSCRIPT after loading the script");
        return CommandEnd::kFailed;
      }
      // Sent again as the script's text, which loads it for the next EVALSHA.
      if (state.give_back) {
        layout_.append_give_back(write, out, StoreLayout::Script::text);
      } else {
        layout_.append_write(write, out, StoreLayout::Script::text);
      }
      state.command = static_cast<std::uint32_t>(out.commands() - 1);
      state.asking = false;
      return CommandEnd::kPending;
    }
    case Status::Code::unavailable:
      // A server that cannot serve (a replica after a failover, loading, a cluster that is
      // down) is as good as unreachable: open the circuit; reconnecting (and reading the
      // slot map again) finds out more.
      topology_.want_refresh();
      failure = Status(Status::Code::unavailable,
                       "Redis at " + from.name() + " cannot serve: " + status.message());
      from.circuit().open("write: " + failure.message());
      return CommandEnd::kFailed;
    default:
      break;
  }
  state.asking = false;
  return CommandEnd::kAnswered;
}

// One parallel round trip: the commands grouped by the node that serves their slot, each
// group copied from the call's RESP to a connection of its node and sent before any reply
// is read. A command that route() sends again goes in the next round.
struct WritePath::Exchange {
  WritePath& path;
  RespWriter& plan;
  std::span<CommandState> items;
  std::span<const StoreWrite> writes;
  Deadline deadline;
  Status failure;  // the first failure

  Exchange(WritePath& p, RespWriter& commands, std::span<CommandState> states,
           std::span<const StoreWrite> made_of)
      : path(p),
        plan(commands),
        items(states),
        writes(made_of),
        deadline(std::chrono::steady_clock::now() + p.options_.command_timeout) {}

  // The items `which` failed as `end`, for `why`; their node's circuit opens if it says so.
  void fail(RedisNode& node, std::span<const std::uint32_t> which, CommandEnd end, Status why) {
    for (const std::uint32_t i : which)
      if (items[i].end == CommandEnd::kPending) items[i].end = end;
    if (why.opens_circuit()) node.circuit().open("write: " + why.message());
    if (failure.ok()) failure = std::move(why);
  }

  // Where split_write_hook cuts a leg's commands: after `which[p]` when it is the BITFIELD
  // that counts a ring write and more of that write's commands follow it.
  bool cut_after(std::span<const std::uint32_t> which, std::size_t p) const noexcept {
    const CommandState& item = items[which[p]];
    if (item.index != 0 || item.give_back || item.write >= writes.size() || p + 1 >= which.size())
      return false;
    const StoreWrite& w = writes[item.write];
    const CommandState& next = items[which[p + 1]];
    return w.key.ring() && w.cost != 0 && next.write == item.write && !next.give_back;
  }

  void run(FunctionRef<void(std::size_t, const redisReply&)> on_reply) {
    struct Leg {
      RedisNode* node = nullptr;
      std::uint32_t begin = 0;  // its items in `order`
      std::uint32_t end = 0;
      std::size_t replies = 0;  // commands sent (ASKING included)
      RedisPool::Lease lease;
    };
    Scratch<Leg, 4> leg_space(items.size());
    Scratch<std::uint32_t, 8> order_space(items.size());
    const std::span<Leg> legs_all = leg_space.span();
    const std::span<std::uint32_t> order = order_space.span();
    void (*const split)() = split_write_hook.load(std::memory_order_relaxed);
    // A leg's connection, leased within the deadline: false (its items failed or
    // skipped) if there is none or the node's circuit is open.
    auto open = [&](Leg& leg, std::span<const std::uint32_t> which) {
      RedisNode& node = *leg.node;
      if (!node.circuit().available()) {
        fail(node, which, CommandEnd::kSkipped,
             Status(Status::Code::closed, node.name() + " unavailable"));
        return false;
      }
      Status acquired;
      leg.lease = node.pool().acquire(deadline, acquired);
      if (!leg.lease) {
        fail(node, which, CommandEnd::kFailed, std::move(acquired));
        return false;
      }
      if (!node.circuit().available()) {
        // The circuit opened while this call waited for a connection: no round trip.
        leg.lease.reset();
        fail(node, which, CommandEnd::kSkipped,
             Status(Status::Code::closed, node.name() + " unavailable"));
        return false;
      }
      if (leg.lease.fresh()) {
        // Opening the connection took up to the connect timeout: the round trip still
        // gets its own.
        deadline =
            std::max(deadline, std::chrono::steady_clock::now() + path.options_.command_timeout);
      }
      return true;
    };
    // Sends `part` of a leg's items on its connection; false (they failed) if it could not.
    auto send = [&](Leg& leg, std::span<const std::uint32_t> part) {
      RespWriter& out = leg.lease->out();
      for (const std::uint32_t i : part) {
        if (items[i].asking) out.command({"ASKING"});
        out.copy_command(plan.command_bytes(items[i].command));
        ++items[i].sends;
      }
      leg.replies = out.commands();
      if (Status sent = leg.lease->send(deadline); !sent.ok()) {
        leg.lease.reset();
        fail(*leg.node, part, CommandEnd::kFailed, sent.within(leg.node->name()));
        return false;
      }
      return true;
    };
    // Reads the replies to `part`, sent; false (those not answered failed) on a failure.
    auto receive = [&](Leg& leg, std::span<const std::uint32_t> part) {
      RedisNode& node = *leg.node;
      std::size_t next = 0;  // the item whose reply comes next
      bool asked = false;    // its ASKING has been answered
      bool unavailable = false;
      const Status received = leg.lease->receive(
          leg.replies,
          [&](std::size_t, const redisReply& r) {
            CommandState& item = items[part[next]];
            if (item.asking && !asked) {
              asked = true;
              return;
            }
            asked = false;
            const std::size_t index = part[next++];
            Status why;
            const CommandEnd end = path.route(r, item, plan, writes, why);
            if (end == CommandEnd::kPending) return;  // sent again in the next round
            item.end = end;
            if (end == CommandEnd::kAnswered) {
              on_reply(index, r);
            } else {
              unavailable = unavailable || why.code() == Status::Code::unavailable;
              if (failure.ok()) failure = std::move(why);
            }
          },
          deadline);
      if (!received.ok()) {
        for (const std::uint32_t i : part)
          if (items[i].end == CommandEnd::kPending && items[i].node == &node)
            items[i].end = CommandEnd::kFailed;
        fail(node, {}, CommandEnd::kFailed, received.within(node.name()));
        return false;
      }
      if (unavailable)
        leg.lease->discard();  // (its server cannot serve: made again after the outage)
      return true;
    };
    for (int round = 0; round < kMostSends; ++round) {
      // The nodes of the pending items, and each node's items in order.
      std::size_t legs = 0;
      std::uint32_t ordered = 0;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (items[i].end != CommandEnd::kPending) continue;
        std::size_t l = 0;
        while (l < legs && legs_all[l].node != items[i].node) ++l;
        if (l == legs) {
          legs_all[legs] = Leg();
          legs_all[legs++].node = items[i].node;
        }
      }
      if (legs == 0) return;
      for (std::size_t l = 0; l < legs; ++l) {
        Leg& leg = legs_all[l];
        leg.begin = ordered;
        for (std::size_t i = 0; i < items.size(); ++i)
          if (items[i].end == CommandEnd::kPending && items[i].node == leg.node)
            order[ordered++] = static_cast<std::uint32_t>(i);
        leg.end = ordered;
      }
      auto which_of = [&](const Leg& leg) {
        return std::span<const std::uint32_t>(order).subspan(leg.begin, leg.end - leg.begin);
      };
      if (split != nullptr) {
        // (Tests: each leg in turn, a round trip up to each cut, the hook after it.)
        for (std::size_t l = 0; l < legs; ++l) {
          Leg& leg = legs_all[l];
          const std::span<const std::uint32_t> which = which_of(leg);
          if (!open(leg, which)) continue;
          std::size_t from = 0;
          for (std::size_t p = 0; p < which.size(); ++p) {
            const bool cut = cut_after(which, p);
            if (!cut && p + 1 < which.size()) continue;
            const std::span<const std::uint32_t> part = which.subspan(from, p + 1 - from);
            from = p + 1;
            if (!send(leg, part) || !receive(leg, part)) break;
            if (cut) split();
          }
          for (const std::uint32_t i : which.subspan(from))  // (after a failure)
            if (items[i].end == CommandEnd::kPending) items[i].end = CommandEnd::kFailed;
          leg.lease.reset();
        }
        continue;
      }
      for (std::size_t l = 0; l < legs; ++l) {
        Leg& leg = legs_all[l];
        if (open(leg, which_of(leg))) (void)send(leg, which_of(leg));
      }
      for (std::size_t l = 0; l < legs; ++l) {
        Leg& leg = legs_all[l];
        if (!leg.lease) continue;
        (void)receive(leg, which_of(leg));
        leg.lease.reset();
      }
    }
    for (CommandState& item : items) {
      if (item.end != CommandEnd::kPending) continue;
      item.end = CommandEnd::kFailed;
      if (failure.ok()) failure = Status(Status::Code::io, "redirected too many times");
    }
  }
};

bool WritePath::add(const StoreWrite& write, std::span<std::uint64_t> counts) {
  bool written = false;
  add_all(std::span<const StoreWrite>(&write, 1),
          std::span<const std::span<std::uint64_t>>(&counts, 1), std::span<bool>(&written, 1));
  return written;
}

void WritePath::add_all(std::span<const StoreWrite> writes,
                        std::span<const std::span<std::uint64_t>> counts, std::span<bool> written) {
  const std::int64_t started = steady_ns();
  // Every write's commands, written once, in one exchange: each to the node of its slot,
  // all nodes at once.
  Plan plan;
  Scratch<CommandState, kMostCommands> state_space(writes.size() * kMostCommands);
  const std::span<CommandState> states = state_space.span();
  Scratch<std::pair<std::uint32_t, std::uint32_t>, 1> commands_of(writes.size());  // first, n
  std::uint32_t n = 0;
  for (std::size_t j = 0; j < writes.size(); ++j) {
    written[j] = false;
    const std::uint32_t first = n;
    this->plan(writes[j], static_cast<std::uint32_t>(j), *plan,
         [&](const CommandState& s) { states[n++] = s; });
    commands_of.span()[j] = {first, n - first};
  }
  if (n == 0) return;
  Scratch<WriteReplies, 1> replies(writes.size());
  Exchange x(*this, *plan, states.first(n), writes);
  x.run([&](std::size_t i, const redisReply& r) {
    const CommandState& s = states[i];
    replies.span()[s.write].take(writes[s.write], s.index, r, counts[s.write]);
  });
  Plan repair;
  for (std::size_t j = 0; j < writes.size(); ++j) {
    const auto [first, size] = commands_of.span()[j];
    if (size == 0) continue;  // skipped: its node is down
    std::array<CommandEnd, kMostCommands> ends{};
    for (std::uint32_t i = 0; i < size; ++i) ends[i] = states[first + i].end;
    repair->clear();
    written[j] = conclude(writes[j], replies.span()[j], std::span(ends).first(size), x.failure,
                          counts[j], started, *repair);
    if (repair->commands() == 0) continue;
    std::array<CommandState, 2> fixes{};
    for (std::uint32_t i = 0; i < repair->commands(); ++i) fixes[i] = {states[first].node, i};
    Exchange fix(*this, *repair, std::span(fixes).first(repair->commands()), {});
    fix.deadline = x.deadline;
    fix.run([](std::size_t, const redisReply&) {});
    if (!fix.failure.ok()) {
      reporter_.note_error("write: tagging the shared window's slot: " + fix.failure.message());
    }
  }
}

bool WritePath::conclude(const StoreWrite& write, const WriteReplies& call,
                         std::span<const CommandEnd> items, const Status& failure,
                         std::span<std::uint64_t> counts, std::int64_t started,
                         RespWriter& repair) {
  const bool counted = write.cost != 0;
  if (!write.key.ring()) return conclude_script(write, call, items[0], failure, counts, started);
  const std::size_t window_reply = counted ? 1 : 0;
  for (std::size_t i = 0; i <= window_reply; ++i) {
    if (items[i] == CommandEnd::kAnswered) continue;
    if (counted) {
      (items[i] == CommandEnd::kSkipped ? writes_skipped_ : writes_failed_)
          .fetch_add(1, std::memory_order_relaxed);
    }
    reporter_.note_error("write: " + failure.message());
    return false;
  }
  for (std::size_t i = window_reply + 1; i < items.size(); ++i) {
    if (items[i] == CommandEnd::kAnswered) continue;
    // The window was written but its change set was not: other nodes' boundary reads
    // miss this write (their own writes still read it).
    reporter_.note_error("write: recording a change: " + failure.message());
    break;
  }
  const std::size_t expected = write.first && counted ? 6 : counted ? 3 : 0;
  if (!call.refused.ok() || !call.window_read || call.bitfield_size != expected) {
    if (counted) writes_failed_.fetch_add(1, std::memory_order_relaxed);
    reporter_.note_error("write refused by Redis: " + (call.refused.ok()
                                                           ? std::string("unexpected reply")
                                                           : call.refused.message()));
    return false;
  }
  if (!counted) return true;

  const std::int64_t e = write.epoch;
  const std::uint32_t n = write.key.subintervals;
  const std::uint16_t tag = StoreLayout::tag_of(e, n);
  // A first write's BITFIELD answers [the slot after the first half of the claim, after
  // the claim, the ring's last byte, e's count, the slots of e - 1 and e + 1]; a later
  // write's the last three; its GETEX, the window.
  const std::size_t at = write.first ? 3 : 0;
  // The tag e's slot has now.
  const auto found =
      write.first ? static_cast<std::uint16_t>(call.bitfield[1] >> 32) : call.slot.first;
  // The window as of this write, in Redis' order (StoreLayout): e's count as this write's
  // addition left it, and its neighbours' as the same command read them, not as the GETEX
  // read them after it (other clients' writes may have come in between).
  if (found == tag || StoreLayout::earlier(found, tag))
    counts[0] = static_cast<std::uint64_t>(call.bitfield[at]);
  counts[1] = StoreLayout::slot_count(call.bitfield[at + 1], e - 1, n);
  counts.back() = StoreLayout::slot_count(call.bitfield[at + 2], e + 1, n);
  if (found != tag && StoreLayout::earlier(found, tag)) {
    // Not e's slot, and not a later lap's: the tag wrapped (a claim cannot lift 65535 to
    // 1), or the key was deleted or expired since this node's first write in e and made
    // again by this one. Tag it, keeping what it counts (for one epoch, perhaps an old
    // lap's count too: it errs high).
    repairs_.fetch_add(1, std::memory_order_relaxed);
    layout_.append_adjust(write.key, e, 0, tag, repair);
  }
  // (A later lap's tag: this write reached Redis a whole ring late, and counted in that
  // lap's epoch. The count errs high; e's decoded count is 0.)
  writes_ok_.fetch_add(1, std::memory_order_relaxed);
  latency_.record(nanoseconds(steady_ns() - started));
  reporter_.note_success();
  return true;
}

bool WritePath::conclude_script(const StoreWrite& write, const WriteReplies& call, CommandEnd end,
                                const Status& failure, std::span<std::uint64_t> counts,
                                std::int64_t started) {
  const bool counted = write.cost != 0;
  if (end != CommandEnd::kAnswered) {
    if (counted) {
      (end == CommandEnd::kSkipped ? writes_skipped_ : writes_failed_)
          .fetch_add(1, std::memory_order_relaxed);
    }
    reporter_.note_error("write: " + failure.message());
    return false;
  }
  if (!call.refused.ok() || !call.script_read) {
    if (counted) writes_failed_.fetch_add(1, std::memory_order_relaxed);
    reporter_.note_error("write refused by Redis: " + (call.refused.ok()
                                                           ? std::string("unexpected reply")
                                                           : call.refused.message()));
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
  reporter_.note_success();
  return true;
}

bool WritePath::give_back_repair(const StoreWrite& give_back, const redisReply& r,
                                 RespWriter& repair) {
  BitfieldReply reply;
  if (!reply.read(r) || reply.size != 2 || !reply.present[1] ||
      static_cast<std::uint16_t>(reply.values[0]) ==
          StoreLayout::tag_of(give_back.epoch, give_back.key.subintervals))
    return false;
  // [the slot's tag, its count after the decrement, or nil if it held less than `cost`]
  // The slot had moved on to another epoch (the give-back came a whole ring late): what
  // was taken was not this epoch's. Put it back (that other epoch reads low meanwhile).
  repairs_.fetch_add(1, std::memory_order_relaxed);
  layout_.append_adjust(give_back.key, give_back.epoch, static_cast<std::int64_t>(give_back.cost),
                        0, repair);
  return true;
}

void WritePath::remove(const StoreWrite& give_back) {
  RedisNode& home = topology_.node_for_resource(give_back.key.resource);
  if (!home.circuit().available()) {
    reporter_.note_error("giving back a count: Redis unavailable");
    return;
  }
  // Not fatal if it fails: the count stays (the shared estimate errs on the safe side)
  // and leaves the window with its subinterval.
  Plan plan;
  layout_.append_give_back(give_back, *plan);
  std::array<CommandState, 2> states{};
  for (std::uint32_t i = 0; i < plan->commands(); ++i) {
    states[i] = {&home, i};
    states[i].give_back = true;
  }
  Exchange x(*this, *plan, std::span(states).first(plan->commands()),
             std::span<const StoreWrite>(&give_back, 1));
  Plan repair;
  Status refused;
  x.run([&](std::size_t i, const redisReply& r) {
    if (refused.ok()) refused = status_of(r);
    if (i == 0 && give_back.key.ring() && r.type != REDIS_REPLY_ERROR)
      give_back_repair(give_back, r, *repair);
  });
  bool ok = states[0].end == CommandEnd::kAnswered;
  if (ok && repair->commands() > 0) {
    std::array<CommandState, 2> fixes{};
    for (std::uint32_t i = 0; i < repair->commands(); ++i) fixes[i] = {x.items[0].node, i};
    Exchange fix(*this, *repair, std::span(fixes).first(repair->commands()), {});
    fix.deadline = x.deadline;
    fix.run([](std::size_t, const redisReply&) {});
    ok = fixes[0].end == CommandEnd::kAnswered;
    if (!ok) x.failure = fix.failure;
  }
  if (!ok || !refused.ok()) {
    reporter_.note_error("giving back a count: " +
                         (refused.ok() ? x.failure.message() : refused.message()));
  }
}

bool WritePath::reset(const LimiterKey& key) {
  RedisNode& home = topology_.node_for_resource(key.resource);
  if (!home.circuit().available()) {
    reporter_.note_error("resetting counts: Redis unavailable");
    return false;
  }
  Plan plan;
  layout_.append_reset(key, *plan);
  std::array<CommandState, 1> states{CommandState{&home, 0}};
  Exchange x(*this, *plan, states, {});
  Status refused;
  x.run([&](std::size_t, const redisReply& r) { refused = status_of(r); });
  const bool ok = states[0].end == CommandEnd::kAnswered && refused.ok();
  if (!ok) {
    reporter_.note_error("resetting counts: " +
                         (refused.ok() ? x.failure.message() : refused.message()));
  }
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

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
