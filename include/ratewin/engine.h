// ratewin/engine.h: the root object applications call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ratewin/clock.h"
#include "ratewin/decision.h"
#include "ratewin/hash.h"
#include "ratewin/limit.h"
#include "ratewin/stats.h"

namespace ratewin {
inline namespace v1 {

namespace detail {
class EngineCore;
struct Record;
class Shard;
}  // namespace detail

enum class LogLevel { debug, info, warning, error };

// Thrown by the Engine constructor with Options::require_store when the shared store
// cannot be used (unreachable within connect_timeout, or refusing the credentials).
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How a Redis server's TLS certificate is checked.
enum class TlsVerify {
  full,  // its chain up to a trusted CA, and the host name (or address) it is for
  ca,    // its chain only: a certificate for any name is accepted
  none,  // nothing: encrypted, but any server (or a man in the middle) is accepted; the
         // engine logs a warning once
};

// TLS to Redis, used by rediss://, rediss-cluster:// and rediss-sentinel:// addresses
// (Options::redis), for every connection: to the server, to each Cluster node, to the
// sentinels and the primary they name. Such a URL may also give each field as a
// parameter (?tls_ca_file=...&tls_verify=ca), which wins over the field here. Files are
// PEM. They are read when the engine starts (one that cannot be used makes the
// constructor throw std::invalid_argument), and again on a later connection after they
// change, so rotated certificates take effect without a restart.
struct TlsOptions {
  std::string ca_file;      // trusted CAs; with ca_dir empty too, the system's store
  std::string ca_dir;       // a folder of trusted CAs named by hash (`openssl rehash`)
  std::string cert_file;    // this client's certificate (chain), for mutual TLS
  std::string key_file;     // its private key; empty: the key is in cert_file
  std::string server_name;  // sent (SNI) and verified; empty: each server's own host
  TlsVerify verify = TlsVerify::full;
  std::string min_version = "1.2";  // the oldest TLS version accepted: "1.2" or "1.3"
  bool operator==(const TlsOptions&) const = default;
};

// How admissions reach the shared store (Options::write_mode).
enum class WriteMode {
  // Each admitted request writes its cost to the store and reads the shared window back,
  // one round trip it waits for; it stands only if the shared counts allow it.
  sync,
  // Requests are decided and counted in memory, without waiting on the network; the
  // engine flushes what it admitted every flush interval, one write per limiter carrying
  // the sum and reading the shared window back. Between flushes each engine admits at
  // most its budget, a share of what the window had left at its last flush among the
  // live engines, weighted by each engine's part of the limiter's recent counts. Past
  // it, one request a round is written through as sync mode does (up to three while
  // budgets round to nothing), and its reply grants half a budget more.
  // The limit may then be exceeded by a bounded amount (README, "Batched mode"). Only
  // sliding_window and fixed_window limits are batched; the others keep to sync.
  batched,
};

// Engine settings. The Engine constructor checks them and throws std::invalid_argument
// naming the first one out of range.
struct Options {
  // Bounds on the limiters held in memory: how many (one per resource and window
  // geometry), and their bytes (records and table; a limiter takes 48 bytes plus 4 per
  // subinterval, plus about 11 of table), each split evenly over up to 64 shards by
  // resource hash. Limiters whose windows are empty are evicted first, least recently used
  // first (Stats::evictions). While the bounds are full of limiters that still count (a
  // flood of new keys), a new resource still gets a limiter of its own: the one holding
  // the fewest counts among the least recently used goes (Stats::evictions_active), and in
  // local mode its counts are kept as a ghost, which its resource starts from again if it
  // comes back while they count (in store mode the store has them). A ghost can be
  // forgotten only for 4 heavier ones in its set; ghost tables grow under a flood to at
  // most 12 bytes per limiter held, within max_memory. Sliding logs are not evicted while they count:
  // new resources then share the overflow limiter of their geometry (Stats::overflowed).
  // Limiters held by a LimiterHandle are never evicted and are made even over the bounds.
  // max_limiters is at least 1; max_memory at least 16 KiB (see Engine::capacity).
  // docs/algorithms.md, "Memory and new keys", says why.
  std::size_t max_limiters = 1'000'000;
  std::size_t max_memory = std::size_t{256} << 20;
  // Source of time; nullptr means system_clock().
  std::shared_ptr<const Clock> clock;

  // The shared store: empty for local mode, else "redis://[user[:password]@]host[:port][/db]",
  // "unix://[user[:password]@]/path/to/socket[?db=N]", a Redis Cluster's seed nodes
  // "redis-cluster://[user[:password]@]host:port[,host:port...]", or a primary behind
  // Redis Sentinel "redis-sentinel://[user[:password]@]host:port[,...]/master-name
  // [?sentinel_password=...&sentinel_user=...&db=N]". With TLS: rediss://,
  // rediss-cluster:// and rediss-sentinel:// (see TlsOptions). The engine starts whether
  // or not Redis is up, and connects when it can (see require_store).
  std::string redis;
  // TLS settings for a rediss address. Set for another address, or for none (local
  // mode), the constructor throws std::invalid_argument (TLS is asked for by the URL's
  // scheme).
  TlsOptions tls;
  // Fail fast: the Engine constructor throws StoreError when the store cannot be used at
  // start (no answer within connect_timeout, a password refused or missing), instead of
  // starting degraded. A store that goes away later is still an outage, decided by the
  // failure policies.
  bool require_store = false;
  // Prefix of every Redis key, so several applications can share one Redis. No '{' or '}'
  // (the braces after it mark the part of a key Redis Cluster hashes).
  std::string key_prefix = "ratewin";
  // Deadlines: establishing a connection (and logging in), and any round trip. Each
  // between 1 ms and 24 h.
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds command_timeout{100};
  // Most connections application threads use at once for allowed requests' writes
  // (at least 1).
  std::size_t max_connections = 64;
  // How long after a subinterval boundary the shared counts of the subinterval that
  // just closed are read, so that writes still in flight land first. Capped at a
  // quarter of the resolution. Between 0 and 24 h.
  std::chrono::milliseconds sync_settle{10};
  // Align epochs to the Redis server's clock (TIME), measured on connecting and then every
  // clock_sync_interval (0: only on connecting; at most 24 h).
  bool sync_clock = true;
  std::chrono::milliseconds clock_sync_interval{10'000};
  // FailurePolicy::partitioned: while the store is unreachable, each engine admits
  // max x partition_share / live nodes (at least 1) of a limit under that policy. 1.0
  // splits the limit exactly; 2.0 allows for nodes whose traffic is uneven (each may take
  // twice its share). Between 0.01 and 1000.
  double partition_share = 1.0;
  // What FailurePolicy::partitioned does in an engine that has not read the live-node
  // count yet (the store was unreachable from the start): FailurePolicy::local (the
  // default) or FailurePolicy::closed.
  FailurePolicy partitioned_unknown = FailurePolicy::local;
  // How admissions reach the store (see WriteMode; no effect in local mode), and in
  // batched mode how often the engine flushes: 0 (the default) chooses per window
  // geometry, a 40th of the interval, between 10 and 50 ms where the resolution allows
  // (a 20th of it), never below 1 ms; else between 1 ms and 1 s. Engines sharing a key
  // prefix should flush at the same interval. The engine's thread flushes, in real time
  // (on multiples of the interval by the engine's clock), unless that clock is a
  // ManualClock (tests): then only flush() does.
  WriteMode write_mode = WriteMode::sync;
  std::chrono::milliseconds flush_interval{0};
  // Where the engine reports what happens to its connection (warnings and errors by
  // default go to stderr, prefixed "ratewin: "). Called from the engine's threads.
  std::function<void(LogLevel, std::string_view)> logger;
};

class LimiterHandle;
class AsyncAcquirer;

// One of the limits a request counts against (see Engine::try_acquire_all).
struct Acquisition {
  std::uint64_t resource;
  Limit limit;
  std::uint64_t cost = 1;
};

// The rate-limiting engine. Thread-safe: any number of threads may call any member
// concurrently. A rejected request is decided from local state only.
class Engine {
 public:
  // Local mode, every default. (Out of line: GCC 12 at -O3 warns falsely on a default
  // Options destroyed in the caller.)
  Engine();
  explicit Engine(Options options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Decides whether `cost` units of `resource` fit in `limit` now, and counts them if
  // they do. Limits with the same interval and resolution share counts on a resource;
  // limits with another geometry are counted apart. cost 0 asks without counting.
  Decision try_acquire(std::uint64_t resource, const Limit& limit, std::uint64_t cost = 1);
  Decision try_acquire(std::string_view resource, const Limit& limit, std::uint64_t cost = 1) {
    return try_acquire(hash(resource), limit, cost);
  }

  // Forgets what `resource` counted under `limit` (every limit of its scope and window):
  // the shared counts in the store and this engine's own, so the next request starts a
  // fresh window (a login counter cleared after a successful login). Returns false when
  // the store could not be reached in time (this engine's counts are gone all the same;
  // the shared ones then stay until they leave the window). Other engines keep what they
  // had already read of the shared counts until it leaves their window (their merges only
  // ever raise counts): reset on the engine that uses the counter.
  bool reset(std::uint64_t resource, const Limit& limit);
  bool reset(std::string_view resource, const Limit& limit) { return reset(hash(resource), limit); }

  // Gives back up to `cost` units counted for `resource` under `limit` (work that turned
  // out not to count, a request that failed before it did anything), from the newest
  // subinterval back, in the store and in this engine; never below 0. Returns the units
  // given back: at most what this engine's window holds (its own counts and the shared
  // ones it has read). A failed store write is noted in Stats::last_error; the shared
  // counts then err high until they leave the window.
  std::uint64_t refund(std::uint64_t resource, const Limit& limit, std::uint64_t cost = 1);
  std::uint64_t refund(std::string_view resource, const Limit& limit, std::uint64_t cost = 1) {
    return refund(hash(resource), limit, cost);
  }

  // All or nothing, for a request that counts against several limits (per key and per
  // endpoint, per second and per hour): admitted only if every limit admits it, and a
  // refused request counts against none of them. out[i] (out must hold items.size()
  // decisions) is limit i's decision. Returns the index of the limit that refused, or
  // items.size() when all admitted. Limits that refuse on this engine's own counts
  // refuse without any write, and the one reported is the one whose retry_after is
  // longest. One that refuses only after the limits before it were counted (a concurrent
  // request, or the shared counts in Redis) has their counts given back, in the store and
  // locally, and their `remaining` says so. Stats count each limit's decision, including
  // admissions given back.
  // In a refused request every out[i] is still limit i's own answer, nothing of the
  // request counted: a limit that refused too has its refusal; one that would have
  // admitted the request has allowed = true, retry_after 0, its `remaining` before the
  // request and its `reset_after` for the counts it holds (so a caller answering per
  // limit, as Envoy's rate limit service does per descriptor, tells the limits within
  // their bounds from those over them). Limits the call did not decide (after the one
  // that refused) are described from this engine's counts, as a rejection is decided:
  // no network, no write, a limiter it holds no counts of as empty; the stats do not
  // count them. (Before 1.9 they were left as Decision{}.)
  // A limit in shadow (Mode::shadow) never refuses the request: its decision says whether
  // it would have (would_reject), and it counts only when every enforcing limit admits the
  // request and it would itself have admitted it (given back with the others otherwise).
  std::size_t try_acquire_all(std::span<const Acquisition> items, std::span<Decision> out);

  // try_acquire_all without waiting on the network, for callers that must not block (an
  // asyncio loop, a C program with callbacks; code on a libuv loop of its own uses
  // AsyncAcquirer). When the decision needs no round trip (a refusal on this engine's
  // own counts, local mode), it fills `out` and returns what try_acquire_all would; `done`
  // is not called. Otherwise it returns kPending: the shared writes go out on the store's
  // own I/O thread, pipelined with other such calls, and `done(refused, decisions)` runs on
  // that thread once they have their replies or failed (within command_timeout; then the
  // failure policies decide; while the store is known to be unreachable they fail at once,
  // and `done` comes back promptly, degraded). `done` must not block, and may call the
  // engine. `items` and `out` need not outlive the call. An engine destroyed with calls in
  // flight completes them first, as failed writes. (Until the I/O thread's own connection
  // to a Redis node is up, its writes to that node are made the blocking way there,
  // delaying other calls by up to a round trip.)
  using AsyncDone =
      std::function<void(std::size_t refused, std::span<const Decision> decisions)>;
  static constexpr std::size_t kPending = ~std::size_t{0};
  std::size_t try_acquire_all_async(std::span<const Acquisition> items, std::span<Decision> out,
                                    AsyncDone done);

  // A handle on the limiter of (resource, limit): skips the registry lookup on every
  // call and keeps the limiter from being evicted while the handle lives.
  LimiterHandle limiter(std::uint64_t resource, const Limit& limit);
  LimiterHandle limiter(std::string_view resource, const Limit& limit);

  // Batched write mode: writes what this engine admitted and has not yet written, reads
  // those limiters' shared windows back, and renews their budgets, now rather than at the
  // next flush interval. False when a write failed (its counts are kept, to be written by
  // a later flush, while they are still in the window). True at once in sync or local mode.
  // The destructor flushes too.
  bool flush();

  Stats stats() const;
  // The key in the shared store (Redis) that holds `resource`'s counts under `limit`
  // (resources are hashed into keys: this finds a name's key for redis-cli); empty in
  // local mode.
  std::string store_key(std::uint64_t resource, const Limit& limit) const;
  std::string store_key(std::string_view resource, const Limit& limit) const {
    return store_key(hash(resource), limit);
  }
  const Options& options() const noexcept;
  // How many limiters of `limit`'s geometry the bounds hold, were they all of it
  // (0: not even one, its window is larger than a shard's share of max_memory).
  std::size_t capacity(const Limit& limit) const noexcept;
  // The memory one limiter of `limit` takes here, as capacity() counts it: 48 bytes and
  // 4 per subinterval for the ring's algorithms (and 4 more with a shared store), 8 per
  // unit of max for a sliding_log.
  std::size_t limiter_bytes(const Limit& limit) const noexcept;

 private:
  friend class AsyncAcquirer;
  std::shared_ptr<detail::EngineCore> core_;
};

// A pinned limiter: one resource under one limit. Movable, not copyable. It may outlive
// the Engine that made it (it keeps the engine's state alive). One handle may be used
// from several threads at once.
class LimiterHandle {
 public:
  LimiterHandle(LimiterHandle&& other) noexcept;
  LimiterHandle& operator=(LimiterHandle&& other) noexcept;
  LimiterHandle(const LimiterHandle&) = delete;
  LimiterHandle& operator=(const LimiterHandle&) = delete;
  ~LimiterHandle();

  // As Engine::try_acquire for this handle's resource and limit. A moved-from handle
  // throws std::logic_error.
  Decision try_acquire(std::uint64_t cost = 1);

  std::uint64_t resource() const noexcept { return resource_; }
  const Limit& limit() const noexcept { return limit_; }

 private:
  friend class Engine;
  LimiterHandle(std::shared_ptr<detail::EngineCore> core, detail::Shard* shard,
                detail::Record* record, std::uint32_t record_id, std::uint64_t resource,
                const Limit& limit);
  void release() noexcept;

  std::shared_ptr<detail::EngineCore> core_;
  detail::Shard* shard_ = nullptr;
  detail::Record* record_ = nullptr;
  std::uint32_t record_id_ = 0;
  std::uint64_t resource_ = 0;
  Limit limit_;
};

}  // namespace v1
}  // namespace ratewin
