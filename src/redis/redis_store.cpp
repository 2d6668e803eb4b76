#include "redis/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <future>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>

#include "redis/steady_ns.h"
#include "redis/tls.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// This engine's id in the change sets: random, so that engines need not agree on ids
// (two of a deployment's engines share one with odds of about K^2 / 2^33).
std::uint32_t random_node_id() {
  std::random_device device;
  std::uint32_t id = 0;
  while (id == 0) id = device();
  return id;
}

}  // namespace

RedisStore::RedisStore(const Options& options, std::shared_ptr<const Clock> clock,
                       SyncTarget& target)
    : options_(options),
      reporter_(options.logger, RedisAddress::parse(options.redis).describe()),
      layout_(options.key_prefix, random_node_id()),
      clock_sync_(std::move(clock), reporter_),
      topology_(secured(RedisAddress::parse(options.redis), options.tls,
                        [this](LogLevel level, const std::string& message) {
                          reporter_.log(level, message);
                        }),
                options_, reporter_,
                [this](RedisNode& node) { loop_.post([this, &node] { probe(node); }); }),
      writes_(options_, layout_, topology_, reporter_),
      boundary_(options_, layout_, clock_sync_, target, reporter_) {
  if (topology_.sentinel()) {
    sentinel_ = std::make_unique<SentinelWatch>(
        topology_.address(), options_.connect_timeout, options_.command_timeout, reporter_,
        [this](const SentinelWatch::Primary& p) { loop_.post([this, p] { follow(p); }); });
  }
  const bool reachable = connect_now();
  if (!reachable && options_.require_store) {
    // (Thrown from the constructor: the members made so far stop their threads.)
    throw StoreError("ratewin: Redis at " + reporter_.where() +
                     " cannot be used: " + reporter_.last_error());
  }
  if (!reachable) topology_.node_for_slot(0).circuit().start(start_failure_, reporter_.last_error());
  loop_.post([this] {
    uv_timer_init(loop_.loop(), &tick_timer_);
    tick_timer_.data = this;
    uv_timer_init(loop_.loop(), &clock_timer_);
    clock_timer_.data = this;
    boundary_.attach(this);
    for (std::size_t i = 0; i < topology_.size(); ++i)
      if (topology_.serves(i) && !topology_.placeholder(topology_.node(i)))
        connection_for(topology_.node(i));
    if (options_.sync_clock && options_.clock_sync_interval.count() > 0) {
      const auto every = static_cast<std::uint64_t>(options_.clock_sync_interval.count());
      uv_timer_start(&clock_timer_, &RedisStore::on_clock_timer, every, every);
    }
    schedule_tick();
  });
  if (sentinel_) sentinel_->start();
}

RedisStore::~RedisStore() { shutdown(); }

void RedisStore::shutdown() {
  if (shut_down_.exchange(true)) return;
  if (sentinel_) sentinel_->stop();
  loop_close_result_ = loop_.stop([this] {
    // write_async's calls in flight complete now, as failed writes.
    if (loop_writer_ != nullptr) loop_writer_->close();
    boundary_.attach(nullptr);
    for (NodeState& n : nodes_)
      if (n.connection) n.connection->close();
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_timer_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&clock_timer_), nullptr);
  });
  nodes_.clear();
  loop_writer_.reset();  // its handles closed with the loop
  if (loop_close_result_ != 0) {
    reporter_.log(LogLevel::error, std::string("the store's loop did not close cleanly: ") +
                                       uv_strerror(loop_close_result_));
  }
}

Status RedisStore::read_slot_map(RedisNode& node, RedisConnection& connection) {
  Status applied(Status::Code::protocol, "no reply");
  if (Status status = connection.round_trip({"CLUSTER", "SLOTS"},
                                            [&](std::size_t, const redisReply& r) {
                                              applied = topology_.apply_cluster_slots(
                                                  r, node.endpoint().host);
                                            });
      !status.ok()) {
    return status;
  }
  return applied.ok() ? applied : applied.within("reading the slot map from " + node.name());
}

namespace {

// The key patterns of an ACL GETUSER reply: its "keys" field, a string in Redis 7
// ("~app:* %R~logs:*"), a list of patterns in Redis 6 (["app:*"]). Empty if none is found.
std::string key_patterns(const redisReply& r) {
  if (r.type != REDIS_REPLY_ARRAY) return {};
  for (std::size_t i = 0; i + 1 < r.elements; i += 2) {
    const redisReply& name = *r.element[i];
    const redisReply& value = *r.element[i + 1];
    if (std::string_view(name.str == nullptr ? "" : name.str, name.len) != "keys") continue;
    if (value.type == REDIS_REPLY_STRING || value.type == REDIS_REPLY_STATUS)
      return std::string(value.str, value.len);
    std::string patterns;
    for (std::size_t j = 0; value.type == REDIS_REPLY_ARRAY && j < value.elements; ++j) {
      const redisReply& p = *value.element[j];
      if (p.type != REDIS_REPLY_STRING) continue;
      if (!patterns.empty()) patterns += ' ';
      patterns += '~';
      patterns.append(p.str, p.len);
    }
    return patterns;
  }
  return {};
}

// A NOPERM about keys ("No permissions to access a key", "... one of the keys used as
// arguments"), not about a command.
bool key_refused(const Status& reply) {
  return error_reason(reply.message()) == "NOPERM" &&
         reply.message().find("key") != std::string::npos;
}

}  // namespace

Status RedisStore::key_access(RedisConnection& connection) {
  const std::string key = layout_.nodes_key();
  Status refused;
  if (Status status = connection.round_trip(
          {"EXISTS", key}, [&](std::size_t, const redisReply& r) { refused = status_of(r); });
      !status.ok()) {
    return status.within("reading " + key);
  }
  // Only a refused key says something here: a redirection (another node serves the key,
  // and this one let the client ask) is fine, and so, for this check, is EXISTS itself
  // refused (an ACL that names commands one by one: ratewin does not need EXISTS).
  if (!key_refused(refused)) return Status();
  std::string user;
  connection.round_trip({"ACL", "WHOAMI"}, [&](std::size_t, const redisReply& r) {
    if (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS) user.assign(r.str, r.len);
  });
  std::string patterns;
  if (!user.empty()) {
    connection.round_trip({"ACL", "GETUSER", user},
                          [&](std::size_t, const redisReply& r) { patterns = key_patterns(r); });
  }
  return Status(Status::Code::refused,
                "the Redis ACL user \"" + (user.empty() ? std::string("?") : user) +
                    "\" may not use the keys of the key prefix \"" + options_.key_prefix +
                    "\" (" + key + ": " + refused.message() + "); " +
                    (patterns.empty()
                         ? std::string("its key patterns could not be read (ACL GETUSER "
                                       "needs @admin)")
                         : "its key patterns are " + patterns) +
                    ": give ratewin a key prefix they allow, or allow ~" + options_.key_prefix +
                    ":* to the user");
}

bool RedisStore::connect_now() {
  // Outside a cluster, node 0; in one, each seed in turn until one gives the slot map.
  if (sentinel_) {
    Status status;
    const SentinelWatch::Primary primary = sentinel_->resolve(status);
    if (primary.host.empty()) {
      start_failure_ = status;
      reporter_.note_error("finding the primary: " + status.message(), /*aside=*/true);
      return false;
    }
    RedisNode* node = topology_.node_at(primary.host, primary.port);
    if (node == nullptr) return false;
    topology_.assign(0, kClusterSlots - 1, *node);
  }
  // A failure noted (and, when Redis refused this client's credentials, what to fix).
  const auto failed = [this](const Status& failure) {
    start_failure_ = failure;
    // (Kept aside: the engine says it itself, as the reason it starts degraded or throws.)
    reporter_.note_error(
        credentials_problem(reporter_.where(), topology_.address().login.authenticates(), failure),
        /*aside=*/true);
  };
  const std::size_t seeds = topology_.cluster() ? topology_.size() : 1;
  for (std::size_t i = 0; i < seeds; ++i) {
    RedisNode& node = topology_.cluster() ? topology_.node(i) : topology_.node_for_slot(0);
    Status status;
    RedisPool::Lease lease =
        node.pool().acquire(std::chrono::steady_clock::now() + options_.command_timeout, status);
    if (!lease) {
      failed(status);
      continue;
    }
    if (topology_.cluster()) {
      status = read_slot_map(node, *lease);
    } else {
      // One round trip proves the connection (PING). A server that refuses it cannot
      // serve this client (no password given, still loading its data): not reachable,
      // so the engine starts degraded and says why.
      Status refused;
      status = lease->round_trip({"PING"},
                                 [&](std::size_t, const redisReply& r) { refused = status_of(r); });
      if (!status.ok()) {
        status = status.within("connecting");
      } else if (!refused.ok()) {
        status = refused.within("PING refused");
      }
    }
    if (status.ok()) status = key_access(*lease);
    if (!status.ok()) {
      failed(status);
      continue;
    }
    if (options_.sync_clock) {
      if (Status measured = clock_sync_.measure(*lease, 3); !measured.ok()) {
        failed(measured.within("reading the Redis clock"));
        continue;
      }
    }
    map_refreshes_.fetch_add(topology_.cluster() ? 1 : 0, std::memory_order_relaxed);
    start_failure_ = Status();
    return true;
  }
  return false;
}

std::unique_ptr<AsyncWriter> RedisStore::async_writer(uv_loop_s* loop) {
  return std::make_unique<AsyncWritePath>(loop, options_, writes_, layout_, topology_, reporter_);
}

void RedisStore::write_async(std::span<const StoreWrite> writes,
                             std::span<const std::span<std::uint64_t>> counts,
                             std::span<bool> written, std::function<void(AsyncWriter&)> done) {
  auto finish = std::make_shared<std::function<void(AsyncWriter&)>>(std::move(done));
  const bool posted = loop_.post([this, writes, counts, written, finish] {
    if (loop_writer_ == nullptr) loop_writer_ = async_writer(loop_.loop());
    loop_writer_->add_all(writes, counts, written, [this, finish] { (*finish)(*loop_writer_); });
  });
  if (!posted) {
    // Shutting down: the writes fail (the failure policies decide), here.
    std::fill(written.begin(), written.end(), false);
    Store::write_async({}, {}, {}, [&](AsyncWriter& writer) { (*finish)(writer); });
  }
}

void RedisStore::add_stats(Stats& s) const {
  s.store = true;
  s.store_available = topology_.all_available() && !reporter_.failing();
  s.circuit_opens = 0;
  for (std::size_t i = 0; i < topology_.size(); ++i)
    s.circuit_opens += topology_.node(i).circuit().opens();
  s.connections = connections_.load(std::memory_order_relaxed);
  writes_.add_stats(s);
  boundary_.add_stats(s);
  s.clock_offset = std::chrono::nanoseconds(clock_sync_.offset());
  s.clock_rtt = std::chrono::nanoseconds(clock_sync_.rtt());
  s.last_error = reporter_.last_error();
  s.store_errors = reporter_.errors();
}

bool RedisStore::sync_now() {
  auto result = std::make_shared<std::promise<bool>>();
  std::future<bool> future = result->get_future();
  const bool posted = loop_.post(
      [this, result] { boundary_.read_all([result](bool ok) { result->set_value(ok); }); });
  if (!posted) return false;
  if (future.wait_for(options_.connect_timeout + options_.command_timeout * 10) !=
      std::future_status::ready) {
    return false;
  }
  return future.get() && topology_.all_available();
}

// ---- loop thread ----

AsyncRedis& RedisStore::connection_for(RedisNode& node) {
  if (nodes_.size() <= node.index()) nodes_.resize(std::size_t{node.index()} + 1);
  NodeState& state = nodes_[node.index()];
  if (state.connection == nullptr) {
    state.connection = std::make_unique<AsyncRedis>(
        loop_.loop(), node.endpoint(), options_.connect_timeout, options_.command_timeout,
        AsyncRedis::Events{[this, &node] { on_ready(node); },
                           [this, &node](const Status& failure, bool dropped) {
                             on_lost(node, failure, dropped);
                           }});
    state.connection->set_raw_handler(&BoundarySync::on_reply);
    state.connection->start();
  }
  return *state.connection;
}

Status RedisStore::route(std::uint16_t slot, AsyncRedis*& connection) {
  RedisNode& node = topology_.node_for_slot(slot);
  if (!node.circuit().available()) return Status(Status::Code::closed, node.name() + " is down");
  AsyncRedis& c = connection_for(node);
  if (!c.ready()) return Status(Status::Code::connect, node.name() + " is not connected");
  connection = &c;
  return {};
}

bool RedisStore::all_ready() const {
  for (std::size_t i = 0; i < topology_.size(); ++i) {
    if (!topology_.serves(i)) continue;
    if (i >= nodes_.size() || nodes_[i].connection == nullptr || !nodes_[i].connection->ready())
      return false;
  }
  return true;
}

AsyncRedis* RedisStore::some_ready_connection() {
  if (clock_node_ < nodes_.size() && nodes_[clock_node_].connection != nullptr &&
      nodes_[clock_node_].connection->ready() && topology_.node(clock_node_).circuit().available())
    return nodes_[clock_node_].connection.get();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].connection != nullptr && nodes_[i].connection->ready() &&
        topology_.node(i).circuit().available()) {
      clock_node_ = i;
      return nodes_[i].connection.get();
    }
  }
  return nullptr;
}

void RedisStore::on_ready(RedisNode& node) {
  connections_.fetch_add(1, std::memory_order_relaxed);
  if (options_.sync_clock && node.index() == clock_node_) clock_sync_.probe(connection_for(node), 5);
  if (!node.circuit().available()) probe(node);
}

void RedisStore::on_lost(RedisNode& node, const Status& failure, bool dropped) {
  // Redis refused this client's credentials (on a login: never a dropped connection): said
  // as the start says it (what to fix, not the PING or AUTH that met the refusal), and kept
  // as the last error rather than replaced by that command's. The start has logged it as an
  // error once; an outage that begins with it is logged by the circuit.
  const bool credentials = failure.code() == Status::Code::auth;
  const std::string said =
      credentials ? credentials_problem(reporter_.where(),
                                        topology_.address().login.authenticates(), failure)
                  : failure.message();
  reporter_.note_error(said, /*aside=*/credentials);
  if (!credentials && !topology_.address().kind_single()) topology_.want_refresh();
  if (dropped) {
    // Redis closed a working connection (its idle timeout, a restart): the background
    // connection is being made again at once. Only if that fails is Redis unreachable.
    reporter_.log(LogLevel::debug, said + "; reconnecting");
  } else if (node.circuit().available() && topology_.serves(node.index())) {
    node.circuit().open(said);
  } else {
    reporter_.log(LogLevel::debug, said);
  }
}

void RedisStore::recover(RedisNode& node) {
  node.pool().drop_idle();  // connections opened before the outage may be dead
  node.circuit().close();
  boundary_.resync_all();
  uv_timer_start(&tick_timer_, &RedisStore::on_tick, 0, 0);
}

void RedisStore::probe(RedisNode& node) {
  // The background connection reconnects on its own while the node is away (and probes
  // when it is back); while it is up, a ROLE that says "master" closes the circuit. A
  // server that is a replica (after a failover, this address may point to the old
  // master) or cannot serve keeps it open; one that denies ROLE is taken at its word that
  // it works.
  if (shut_down_.load(std::memory_order_relaxed) || topology_.placeholder(node)) return;
  if (nodes_.size() <= node.index()) nodes_.resize(std::size_t{node.index()} + 1);
  NodeState& state = nodes_[node.index()];
  AsyncRedis& connection = connection_for(node);
  if (state.probing || !connection.ready()) return;
  state.probing = true;
  state.last_probe_ns = steady_ns();
  connection.command({"ROLE"}, [this, &node, &connection](const redisReply* reply,
                                                          const Status& failure) {
    if (reply == nullptr) {
      nodes_[node.index()].probing = false;
      reporter_.note_error("probe: " + failure.message());
      return;
    }
    bool serves = true;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
        reply->element[0]->type == REDIS_REPLY_STRING) {
      serves = std::string_view(reply->element[0]->str, reply->element[0]->len) == "master";
    } else if (status_of(*reply).code() == Status::Code::unavailable) {
      serves = false;
    }
    if (!serves) {
      nodes_[node.index()].probing = false;
      reporter_.note_error("Redis at " + node.endpoint().describe() +
                           " cannot take writes now (ROLE: " +
                           (reply->type == REDIS_REPLY_ARRAY
                                ? std::string(reply->element[0]->str, reply->element[0]->len)
                                : reply_text(*reply)) +
                           ")");
      if (!topology_.address().kind_single()) topology_.want_refresh();
      return;
    }
    // A node that serves, but not this client's keys (an ACL that forbids the key
    // prefix: key_access() at start), keeps its circuit open.
    const std::string key = layout_.nodes_key();
    connection.command({"EXISTS", key}, [this, &node, key](const redisReply* r, const Status& why) {
      nodes_[node.index()].probing = false;
      if (r == nullptr) {
        reporter_.note_error("probe: " + why.message());
        return;
      }
      if (r->type == REDIS_REPLY_ERROR && key_refused(status_of(*r))) {
        reporter_.note_error("probe (" + key + "): " + std::string(r->str, r->len));
        return;
      }
      if (!node.circuit().available()) recover(node);
    });
  });
}

void RedisStore::refresh_map() {
  AsyncRedis* connection = nullptr;
  std::size_t asked = 0;
  // Any node that answers will do: one whose circuit is closed first.
  for (int pass = 0; pass < 2 && connection == nullptr; ++pass) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].connection == nullptr || !nodes_[i].connection->ready()) continue;
      if (pass == 0 && !topology_.node(i).circuit().available()) continue;
      connection = nodes_[i].connection.get();
      asked = i;
      break;
    }
  }
  last_refresh_ns_ = steady_ns();
  if (connection == nullptr) {
    // Nobody connected: make sure every known node is being connected to.
    for (std::size_t i = 0; i < topology_.size(); ++i) connection_for(topology_.node(i));
    return;
  }
  refreshing_ = true;
  connection->command(
      {"CLUSTER", "SLOTS"}, [this, asked](const redisReply* reply, const Status& failure) {
        refreshing_ = false;
        const Status applied =
            reply == nullptr
                ? failure
                : topology_.apply_cluster_slots(*reply, topology_.node(asked).endpoint().host);
        if (applied.ok()) {
          map_refreshes_.fetch_add(1, std::memory_order_relaxed);
          refresh_backoff_ns_ = 250'000'000;
          // A node that serves no slots now (a failed primary, replaced) is no outage:
          // its limiters' slots are served elsewhere, and are read whole there.
          const bool was_down = !topology_.all_available();
          topology_.retire_unused();
          if (was_down && topology_.all_available()) boundary_.resync_all();
          for (std::size_t i = 0; i < topology_.size(); ++i)
            if (topology_.serves(i)) connection_for(topology_.node(i));
          return;
        }
        reporter_.note_error("reading the slot map: " + applied.message());
        refresh_backoff_ns_ = std::min<std::int64_t>(refresh_backoff_ns_ * 2, 2'000'000'000);
      });
}

void RedisStore::follow(const SentinelWatch::Primary& primary) {
  RedisNode* node = topology_.node_at(primary.host, primary.port);
  if (node == nullptr || &topology_.node_for_slot(0) == node) return;
  reporter_.log(LogLevel::warning, "the primary of '" + topology_.address().master_name +
                                       "' is now " + node->endpoint().describe());
  topology_.assign(0, kClusterSlots - 1, *node);
  // The old primary (or "none known") serves nothing now: no outage of its own.
  const bool was_down = !topology_.all_available();
  topology_.retire_unused();
  connection_for(*node);
  if (!node->circuit().available()) {
    probe(*node);
  } else if (was_down) {
    boundary_.resync_all();
  }
}

void RedisStore::on_clock_timer(uv_timer_t* timer) {
  auto* self = static_cast<RedisStore*>(timer->data);
  if (AsyncRedis* c = self->some_ready_connection()) self->clock_sync_.probe(*c, 1);
}

void RedisStore::on_tick(uv_timer_t* timer) { static_cast<RedisStore*>(timer->data)->tick(); }

void RedisStore::tick() {
  const std::int64_t now = steady_ns();
  bool any_available = false;
  for (std::size_t i = 0; i < topology_.size(); ++i) {
    RedisNode& node = topology_.node(i);
    if (!topology_.serves(i)) continue;
    if (node.circuit().available()) {
      any_available = true;
    } else if (i >= nodes_.size() || now - nodes_[i].last_probe_ns >= 200'000'000) {
      probe(node);
    }
  }
  if (topology_.cluster() && !refreshing_) {
    const std::int64_t since = now - last_refresh_ns_;
    const bool wanted = topology_.take_refresh() || !topology_.all_available();
    if ((wanted && since >= refresh_backoff_ns_) || since >= 10'000'000'000) refresh_map();
  }
  if (sentinel_ && topology_.take_refresh()) sentinel_->ask();
  boundary_.tick(any_available);
  schedule_tick();
}

void RedisStore::schedule_tick() {
  if (shut_down_.load(std::memory_order_relaxed)) return;
  // Wake at the next boundary (+ settle) of any geometry, and at least every 50 ms to
  // take in limiters of geometries not seen yet.
  const std::int64_t delay = boundary_.next_due(clock_sync_.now(), 50'000'000);
  const auto ms = static_cast<std::uint64_t>((delay + 999'999) / 1'000'000);
  uv_timer_start(&tick_timer_, &RedisStore::on_tick, ms, 0);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
