#include "redis/async_write_path.h"

#include <hiredis/hiredis.h>

#include <algorithm>

#include "redis/steady_ns.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

constexpr std::string_view kAsking = "*1\r\n$6\r\nASKING\r\n";
int asked;  // the context of an ASKING, whose reply says nothing

}  // namespace

AsyncWritePath::~AsyncWritePath() = default;

AsyncRedis* AsyncWritePath::connection(RedisNode& node) {
  if (closed_) return nullptr;
  for (Link& l : links_)
    if (l.node == &node) return l.redis.get();
  auto redis = std::make_unique<AsyncRedis>(loop_, node.endpoint(), options_.connect_timeout,
                                            options_.command_timeout, AsyncRedis::Events{});
  redis->set_raw_handler(&AsyncWritePath::on_reply);
  redis->start();
  links_.push_back({&node, std::move(redis)});
  return links_.back().redis.get();
}

AsyncWritePath::Batch& AsyncWritePath::new_batch() {
  if (spare_.empty()) spare_.emplace_front();
  batches_.splice(batches_.begin(), spare_, spare_.begin());
  Batch& b = batches_.front();
  b.self = batches_.begin();
  b.path = this;
  b.resp.clear();
  b.items.clear();
  b.failure = Status();
  b.started = steady_ns();
  b.removing = false;
  b.done = nullptr;
  return b;
}

void AsyncWritePath::add_all(std::span<const StoreWrite> writes,
                             std::span<const std::span<std::uint64_t>> counts,
                             std::span<bool> written, std::function<void()> done) {
  Batch& b = new_batch();
  b.writes = writes;
  b.counts = counts;
  b.written = written;
  b.done = std::move(done);
  b.commands_of.assign(writes.size(), {0, 0});
  b.replies.assign(writes.size(), WriteReplies{});
  for (std::size_t j = 0; j < writes.size(); ++j) {
    written[j] = false;
    const auto first = static_cast<std::uint32_t>(b.items.size());
    if (!path_.plan(writes[j], static_cast<std::uint32_t>(j), b.resp,
                    [&](const CommandState& s) { b.items.push_back({&b, s}); })) {
      continue;  // its node is down: skipped
    }
    bool ready = true;
    for (std::size_t i = first; i < b.items.size(); ++i) {
      const AsyncRedis* c = connection(*b.items[i].state.node);
      ready = ready && c != nullptr && c->ready();
    }
    if (!ready) {
      // No connection of this loop's yet (or again): the blocking path, this once.
      b.items.resize(first);
      written[j] = path_.add(writes[j], counts[j]);
      continue;
    }
    b.commands_of[j] = {first, static_cast<std::uint32_t>(b.items.size()) - first};
  }
  b.open = b.items.size();
  if (b.open == 0) return finish(b);
  // (The items vector is complete: sends may now refer to its elements.)
  void (*const split)() = split_write_hook.load(std::memory_order_relaxed);
  for (std::size_t k = 0; k < b.items.size(); ++k) {
    send(b, k);
    if (split == nullptr || k + 1 == b.items.size()) continue;
    // (Tests: the BITFIELD that counts a ring write goes out before the rest of it.)
    const CommandState& s = b.items[k].state;
    const CommandState& next = b.items[k + 1].state;
    const StoreWrite& w = writes[s.write];
    if (s.index != 0 || next.write != s.write || !w.key.ring() || w.cost == 0) continue;
    if (AsyncRedis* c = connection(*s.node); c != nullptr && c->ready()) c->flush();
    split();
  }
}

void AsyncWritePath::send(Batch& b, std::size_t k) {
  CommandState& state = b.items[k].state;
  RedisNode& node = *state.node;
  if (!node.circuit().available()) {
    if (b.failure.ok()) b.failure = Status(Status::Code::closed, node.name() + " unavailable");
    return settle(b, k, CommandEnd::kSkipped);
  }
  AsyncRedis* c = connection(node);
  if (c == nullptr || !c->ready()) {
    // (A redirection to a node this loop has no connection to yet: it fails this time,
    // and the connection is made for the next.)
    if (b.failure.ok()) {
      b.failure = Status(Status::Code::connect, node.name() + ": no connection from this loop yet");
    }
    return settle(b, k, CommandEnd::kFailed);
  }
  ++state.sends;
  if (state.asking) (void)c->command_formatted(kAsking, &asked);
  if (!c->command_formatted(b.resp.command_bytes(state.command), &b.items[k])) {
    if (b.failure.ok()) b.failure = Status(Status::Code::io, node.name() + ": cannot send the command");
    settle(b, k, CommandEnd::kFailed);
  }
}

void AsyncWritePath::on_reply(const redisReply* reply, void* context) {
  if (context == &asked) return;
  auto* item = static_cast<Batch::Item*>(context);
  Batch& b = *item->batch;
  b.path->take(b, static_cast<std::size_t>(item - b.items.data()), reply);
}

void AsyncWritePath::take(Batch& b, std::size_t k, const redisReply* r) {
  CommandState& state = b.items[k].state;
  RedisNode& from = *state.node;
  if (r == nullptr) {
    const Status why(closed_ ? Status::Code::closed : Status::Code::io,
                     from.name() + ": " + (closed_ ? "closed" : "connection lost"));
    if (why.opens_circuit()) from.circuit().open("write: " + why.message());
    if (b.failure.ok()) b.failure = why;
    return settle(b, k, CommandEnd::kFailed);
  }
  Status why;
  const CommandEnd end = path_.route(*r, state, b.resp, b.writes, why);
  if (end == CommandEnd::kPending) return send(b, k);  // redirected, or the script's text
  if (end == CommandEnd::kFailed) {
    if (b.failure.ok()) b.failure = std::move(why);
    return settle(b, k, CommandEnd::kFailed);
  }
  if (b.removing) {
    // A give-back: the error it may get is noted; a ring's first reply may call for a
    // correction (the slot had moved on).
    if (r->type == REDIS_REPLY_ERROR && b.failure.ok()) b.failure = status_of(*r);
    repair_.clear();
    if (state.index == 0 && b.give_back.key.ring() && r->type != REDIS_REPLY_ERROR &&
        path_.give_back_repair(b.give_back, *r, repair_)) {
      fire(from, repair_);
    }
  } else {
    b.replies[state.write].take(b.writes[state.write], state.index, *r, b.counts[state.write]);
  }
  settle(b, k, CommandEnd::kAnswered);
}

void AsyncWritePath::settle(Batch& b, std::size_t k, CommandEnd end) {
  b.items[k].state.end = end;
  if (--b.open == 0) finish(b);
}

void AsyncWritePath::finish(Batch& b) {
  if (b.removing) {
    if (!b.failure.ok()) reporter_.note_error("giving back a count: " + b.failure.message());
  } else {
    for (std::size_t j = 0; j < b.writes.size(); ++j) {
      const auto [first, size] = b.commands_of[j];
      if (size == 0) continue;  // skipped, or made synchronously
      std::array<CommandEnd, WritePath::kMostCommands> ends{};
      for (std::uint32_t i = 0; i < size; ++i) ends[i] = b.items[first + i].state.end;
      repair_.clear();
      b.written[j] = path_.conclude(b.writes[j], b.replies[j], std::span(ends).first(size),
                                    b.failure, b.counts[j], b.started, repair_);
      if (repair_.commands() > 0) fire(*b.items[first].state.node, repair_);
    }
  }
  // The batch goes before its caller learns the outcome: `done` may free the spans.
  const std::function<void()> done = std::move(b.done);
  spare_.splice(spare_.begin(), batches_, b.self);
  if (done) done();
}

void AsyncWritePath::fire(RedisNode& node, const RespWriter& resp) {
  AsyncRedis* c = connection(node);
  if (c == nullptr || !c->ready() || !node.circuit().available()) {
    reporter_.note_error("write: a correction could not be sent to " + node.name());
    return;
  }
  for (std::size_t i = 0; i < resp.commands(); ++i) {
    c->command_resp(resp.command_bytes(i), [this](const redisReply* r, const Status& failure) {
      if (r == nullptr) {
        reporter_.note_error("write: a correction failed: " + failure.message());
      } else if (r->type == REDIS_REPLY_ERROR) {
        reporter_.note_error("write: a correction: " + reply_text(*r));
      }
    });
  }
}

void AsyncWritePath::remove(const StoreWrite& give_back) {
  RedisNode& home = topology_.node_for_resource(give_back.key.resource);
  if (!home.circuit().available()) {
    reporter_.note_error("giving back a count: Redis unavailable");
    return;
  }
  const AsyncRedis* c = connection(home);
  if (c == nullptr || !c->ready()) {
    path_.remove(give_back);
    return;
  }
  Batch& b = new_batch();
  b.removing = true;
  b.give_back = give_back;
  b.writes = std::span<const StoreWrite>(&b.give_back, 1);
  b.counts = {};
  b.written = {};
  layout_.append_give_back(b.give_back, b.resp);
  for (std::uint32_t i = 0; i < b.resp.commands(); ++i) {
    CommandState s;
    s.node = &home;
    s.command = i;
    s.index = static_cast<std::uint8_t>(i);
    s.give_back = true;
    b.items.push_back({&b, s});
  }
  b.open = b.items.size();
  for (std::size_t k = 0; k < b.items.size(); ++k) send(b, k);
}

void AsyncWritePath::close() {
  if (closed_) return;
  closed_ = true;
  // Closing a connection fails its commands: their batches complete now.
  for (Link& l : links_) l.redis->close();
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
