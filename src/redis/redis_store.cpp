#include "redis/redis_store.h"

#include <hiredis/hiredis.h>

#include <future>
#include <random>

#include "redis/steady_ns.h"

namespace ratewin::inline v1::detail {
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
      endpoint_(RedisEndpoint::parse(options.redis)),
      reporter_(options.logger, endpoint_.describe()),
      layout_(options.key_prefix, random_node_id()),
      clock_sync_(std::move(clock), reporter_),
      circuit_(reporter_, [this] { loop_.post([this] { probe(); }); }),
      pool_(endpoint_, options.connect_timeout, options.command_timeout, options.max_connections),
      writes_(options_, layout_, pool_, circuit_, reporter_),
      boundary_(options_, layout_, clock_sync_, target, reporter_) {
  const bool reachable = connect_now();
  circuit_.start(reachable, reporter_.last_error());
  loop_.post([this] {
    uv_timer_init(loop_.loop(), &tick_timer_);
    tick_timer_.data = this;
    uv_timer_init(loop_.loop(), &clock_timer_);
    clock_timer_.data = this;
    async_ = std::make_unique<AsyncRedis>(
        loop_.loop(), endpoint_, options_.connect_timeout, options_.command_timeout,
        AsyncRedis::Events{
            [this] { on_ready(); },
            [this](const std::string& error, bool dropped) { on_lost(error, dropped); }});
    async_->set_raw_handler(&BoundarySync::on_reply);
    boundary_.attach(async_.get());
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
    boundary_.attach(nullptr);
    if (async_) async_->close();
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_timer_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&clock_timer_), nullptr);
  });
  async_.reset();
  if (loop_close_result_ != 0) {
    reporter_.log(LogLevel::error, std::string("the store's loop did not close cleanly: ") +
                                       uv_strerror(loop_close_result_));
  }
}

bool RedisStore::connect_now() {
  std::string error;
  RedisPool::Failure failure{};
  RedisPool::Lease lease =
      pool_.acquire(std::chrono::steady_clock::now() + options_.command_timeout, failure, error);
  if (!lease) {
    reporter_.note_error(error);
    return false;
  }
  // One round trip proves the connection (PING), then the clock.
  std::string refused;
  if (!lease->round_trip(
          {"PING"},
          [&](std::size_t, const redisReply& r) {
            if (r.type == REDIS_REPLY_ERROR) refused = reply_text(r);
          },
          error)) {
    reporter_.note_error("connecting: " + error);
    return false;
  }
  if (!refused.empty()) reporter_.note_error("PING refused: " + refused);
  if (options_.sync_clock && !clock_sync_.measure(*lease, 3, error)) {
    reporter_.note_error("reading the Redis clock: " + error);
    return false;
  }
  return true;
}

void RedisStore::add_stats(Stats& s) const {
  s.store = true;
  s.store_available = available();
  s.circuit_opens = circuit_.opens();
  s.connections = connections_.load(std::memory_order_relaxed);
  writes_.add_stats(s);
  boundary_.add_stats(s);
  s.clock_offset = std::chrono::nanoseconds(clock_sync_.offset());
  s.clock_rtt = std::chrono::nanoseconds(clock_sync_.rtt());
  s.last_error = reporter_.last_error();
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
  return future.get() && available();
}

// ---- loop thread ----

void RedisStore::on_ready() {
  connections_.fetch_add(1, std::memory_order_relaxed);
  if (options_.sync_clock) clock_sync_.probe(*async_, 5);
  if (!available()) probe();
}

void RedisStore::on_lost(const std::string& error, bool dropped) {
  reporter_.note_error(error);
  if (dropped) {
    // Redis closed a working connection (its idle timeout, a restart): the background
    // connection is being made again at once. Only if that fails is Redis unreachable.
    reporter_.log(LogLevel::debug, error + "; reconnecting");
  } else if (available()) {
    circuit_.open(error);
  } else {
    reporter_.log(LogLevel::debug, error);
  }
}

void RedisStore::recover() {
  pool_.drop_idle();  // connections opened before the outage may be dead
  circuit_.close();
  boundary_.resync_all();
  uv_timer_start(&tick_timer_, &RedisStore::on_tick, 0, 0);
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
      reporter_.note_error("probe: " + error);
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
      reporter_.note_error("Redis at " + endpoint_.describe() + " cannot take writes now (ROLE: " +
                           (reply->type == REDIS_REPLY_ARRAY
                                ? std::string(reply->element[0]->str, reply->element[0]->len)
                                : reply_text(*reply)) +
                           ")");
      return;
    }
    if (!available()) recover();
  });
}

void RedisStore::on_clock_timer(uv_timer_t* timer) {
  auto* self = static_cast<RedisStore*>(timer->data);
  if (self->async_ != nullptr) self->clock_sync_.probe(*self->async_, 1);
}

void RedisStore::on_tick(uv_timer_t* timer) { static_cast<RedisStore*>(timer->data)->tick(); }

void RedisStore::tick() {
  if (!available() && steady_ns() - last_probe_ns_ >= 200'000'000) probe();
  boundary_.tick(available());
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

}  // namespace ratewin::inline v1::detail
