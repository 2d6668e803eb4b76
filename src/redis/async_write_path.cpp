#include "redis/async_write_path.h"

#include <hiredis/hiredis.h>

#include <algorithm>

#include "redis/connection.h"
#include "redis/steady_ns.h"

namespace ratewin::inline v1::detail {
namespace {

constexpr int kRounds = 4;  // sends of one command, redirections included

RedisConnection::Argv argv_of(const std::vector<std::string>& command) {
  return RedisConnection::Argv(command.begin(), command.end());
}

// A command in RESP, as Redis reads it.
void format(const std::vector<std::string>& command, std::string& out) {
  out.clear();
  out += '*';
  out += std::to_string(command.size());
  out += "\r\n";
  for (const std::string& arg : command) {
    out += '$';
    out += std::to_string(arg.size());
    out += "\r\n";
    out += arg;
    out += "\r\n";
  }
}

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

void AsyncWritePath::add_all(std::span<const StoreWrite> writes,
                             std::span<const std::span<std::uint64_t>> counts,
                             std::span<bool> written, std::function<void()> done) {
  if (spare_.empty()) spare_.emplace_front();
  batches_.splice(batches_.begin(), spare_, spare_.begin());
  Batch& b = batches_.front();
  b.self = batches_.begin();
  b.path = this;
  b.items.clear();
  b.error.clear();
  for (WriteReplies& r : b.replies) r = WriteReplies{};
  b.writes = writes;
  b.counts = counts;
  b.written = written;
  b.done = std::move(done);
  b.started = steady_ns();
  b.plans.resize(writes.size());
  b.replies.resize(writes.size());
  for (std::size_t j = 0; j < writes.size(); ++j) {
    written[j] = false;
    WritePlan& plan = b.plans[j];
    plan.commands.clear();
    if (!path_.plan(writes[j], plan)) continue;  // its node is down: skipped
    bool ready = true;
    for (std::size_t i = 0; i < plan.commands.size(); ++i) {
      const AsyncRedis* c = connection(plan.node(i));
      ready = ready && c != nullptr && c->ready();
    }
    if (!ready) {
      // No connection of this loop's yet (or again): the blocking path, this once.
      plan.commands.clear();
      written[j] = path_.add(writes[j], counts[j]);
      continue;
    }
    for (std::size_t i = 0; i < plan.commands.size(); ++i)
      b.items.push_back({&b, j, i, &plan.node(i)});
  }
  b.open = b.items.size();
  if (b.open == 0) return finish(b);
  // (The items vector is complete: sends may now refer to its elements by index.)
  for (std::size_t k = 0; k < b.items.size(); ++k) send(b, k);
}

void AsyncWritePath::send(Batch& b, std::size_t k) {
  Batch::Item& item = b.items[k];
  RedisNode& node = *item.node;
  if (!node.circuit().available()) {
    if (b.error.empty()) b.error = node.name() + " unavailable";
    return settle(b, k, CommandEnd::kSkipped);
  }
  AsyncRedis* c = connection(node);
  if (c == nullptr || !c->ready()) {
    // (A redirection to a node this loop has no connection to yet: it fails this time,
    // and the connection is made for the next.)
    if (b.error.empty()) b.error = node.name() + ": no connection from this loop yet";
    return settle(b, k, CommandEnd::kFailed);
  }
  ++item.rounds;
  if (item.asking) (void)c->command_formatted(kAsking, &asked);
  format(b.plans[item.write].commands[item.index], resp_);
  if (!c->command_formatted(resp_, &item)) {
    if (b.error.empty()) b.error = node.name() + ": cannot send the command";
    settle(b, k, CommandEnd::kFailed);
  }
}

void AsyncWritePath::on_reply(const redisReply* reply, void* context) {
  if (context == &asked) return;
  auto* item = static_cast<Batch::Item*>(context);
  Batch& b = *item->batch;
  b.path->take(b, static_cast<std::size_t>(item - b.items.data()), reply);
}

void AsyncWritePath::take(Batch& bb, std::size_t k, const redisReply* r) {
  Batch::Item& it = bb.items[k];
  RedisNode& from = *it.node;
  if (r == nullptr) {
    const std::string why = from.name() + ": " + (closed_ ? "closed" : "connection lost");
    if (bb.error.empty()) bb.error = why;
    if (!closed_) from.circuit().open("write: " + why);
    return settle(bb, k, CommandEnd::kFailed);
  }
  if (const Topology::Redirect to = topology_.redirect(*r, from); to.node) {
    if (it.rounds >= kRounds) {
      if (bb.error.empty()) bb.error = "redirected too many times";
      return settle(bb, k, CommandEnd::kFailed);
    }
    it.node = to.node;
    it.asking = to.ask;
    return send(bb, k);
  }
  it.asking = false;
  if (r->type == REDIS_REPLY_ERROR &&
      StoreLayout::load_instead(bb.plans[it.write].commands[it.index],
                                std::string_view(r->str, r->len))) {
    // The script's text instead of its SHA, as WritePath does.
    if (it.rounds >= kRounds) {
      if (bb.error.empty()) bb.error = "NOSCRIPT after loading the script";
      return settle(bb, k, CommandEnd::kFailed);
    }
    return send(bb, k);
  }
  if (server_unavailable(*r)) {
    // As WritePath: a server that cannot serve is as good as unreachable.
    topology_.want_refresh();
    const std::string why = "Redis at " + from.name() + " cannot serve: " + reply_text(*r);
    if (bb.error.empty()) bb.error = why;
    from.circuit().open("write: " + why);
    return settle(bb, k, CommandEnd::kFailed);
  }
  bb.replies[it.write].take(bb.writes[it.write], it.index, *r);
  settle(bb, k, CommandEnd::kAnswered);
}

void AsyncWritePath::settle(Batch& b, std::size_t k, CommandEnd end) {
  b.items[k].end = end;
  if (--b.open == 0) finish(b);
}

void AsyncWritePath::finish(Batch& b) {
  std::vector<CommandEnd> ends;
  std::vector<Command> repair;
  std::size_t k = 0;
  for (std::size_t j = 0; j < b.writes.size(); ++j) {
    const std::size_t size = b.plans[j].commands.size();
    if (size == 0) continue;  // skipped, or made synchronously
    ends.clear();
    for (std::size_t i = 0; i < size; ++i) ends.push_back(b.items[k + i].end);
    RedisNode& home = *b.items[k].node;
    k += size;
    repair.clear();
    b.written[j] =
        path_.conclude(b.writes[j], b.replies[j], ends, b.error, b.counts[j], b.started, repair);
    for (const Command& c : repair) fire(home, c);
  }
  // The batch goes before its caller learns the outcome: `done` may free the spans.
  const std::function<void()> done = std::move(b.done);
  spare_.splice(spare_.begin(), batches_, b.self);
  done();
}

void AsyncWritePath::fire(RedisNode& node, const std::vector<std::string>& command,
                          std::function<void(const redisReply*)> then) {
  AsyncRedis* c = connection(node);
  if (c == nullptr || !c->ready() || !node.circuit().available()) {
    reporter_.note_error("write: a correction could not be sent to " + node.name());
    return;
  }
  c->command(argv_of(command),
             [this, then = std::move(then)](const redisReply* r, const std::string& error) {
               if (r == nullptr) {
                 reporter_.note_error("write: a correction failed: " + error);
                 return;
               }
               // (A NOSCRIPT that `then` answers by loading the script is not an error.)
               const bool reloads = then && r->type == REDIS_REPLY_ERROR &&
                                    std::string_view(r->str, r->len).starts_with("NOSCRIPT");
               if (r->type == REDIS_REPLY_ERROR && !reloads)
                 reporter_.note_error("write: a correction: " + reply_text(*r));
               if (then) then(r);
             });
}

void AsyncWritePath::remove(const StoreWrite& give_back) {
  const LimiterKey& key = give_back.key;
  const std::int64_t epoch = give_back.epoch;
  const std::uint64_t cost = give_back.cost;
  RedisNode& home = topology_.node_for_resource(key.resource);
  if (!home.circuit().available()) {
    reporter_.note_error("giving back a count: Redis unavailable");
    return;
  }
  const AsyncRedis* c = connection(home);
  if (c == nullptr || !c->ready()) {
    path_.remove(give_back);
    return;
  }
  if (!key.ring()) {
    Command command = layout_.script_command(give_back, true);
    RedisNode* node = &home;
    fire(home, command, [this, node, command](const redisReply* r) mutable {
      if (r->type == REDIS_REPLY_ERROR &&
          StoreLayout::load_instead(command, std::string_view(r->str, r->len)))
        fire(*node, command);
    });
    return;
  }
  const std::vector<Command> commands = layout_.give_back_commands(key, epoch, cost);
  RedisNode* node = &home;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (i != 0) {
      fire(home, commands[i]);
      continue;
    }
    fire(home, commands[i], [this, node, key, epoch, cost](const redisReply* r) {
      if (r->type == REDIS_REPLY_ERROR) return;
      for (const Command& fix : path_.give_back_repair(key, epoch, cost, *r)) fire(*node, fix);
    });
  }
}

void AsyncWritePath::close() {
  if (closed_) return;
  closed_ = true;
  // Closing a connection fails its commands: their batches complete now.
  for (Link& l : links_) l.redis->close();
}

}  // namespace ratewin::inline v1::detail
