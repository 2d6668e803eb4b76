// Temporary per-key overrides set through the admin API: an absolute limit or a
// multiplier, each with an expiry. With Redis they are kept in a hash and announced on
// a pub/sub channel, so every instance applies them (each re-reads the hash on every
// announcement, on connecting, and every few seconds); without Redis they are local.
// Changes wait on Redis: a caller that must not (an event loop) submits them to a writer
// thread of this class's own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "common/job_queue.h"
#include "common/published.h"
#include "ratewin/engine.h"
#include "ratewin_internal/redis_client.h"

namespace ratewin::server {

using internal::RedisTarget;

class JsonWriter;

struct Override {
  enum class Kind { limit, multiplier };
  Kind kind = Kind::multiplier;
  double value = 1;             // the limit (a whole number) or the multiplier
  std::int64_t expires_ms = 0;  // Unix time in ms

  bool active(std::int64_t now_ms) const noexcept { return expires_ms > now_ms; }
  // The limit's max for this key under the override (at least 1).
  std::uint64_t apply(std::uint64_t max) const noexcept;
  // "limit 100 1700000000000" / "multiplier 2.5 1700000000000", as stored in Redis.
  std::string encode() const;
  static std::optional<Override> decode(std::string_view text);
  // {"key": key, "limit" or "multiplier": value, "expires_in_s": whole seconds left, 0
  // once expired}, as the next value `w` writes.
  void to_json(JsonWriter& w, std::string_view key) const;
};

using OverrideMap = std::unordered_map<std::string, Override>;

// A change of one key's override: set to `value`, or removed when there is none.
struct OverrideChange {
  std::string key;
  std::optional<Override> value;
};

std::int64_t unix_ms() noexcept;

class Overrides {
 public:
  using Log = std::function<void(LogLevel, std::string_view)>;
  // Without a Redis address: local only.
  Overrides(RedisTarget redis, std::string key_prefix, Log log);
  ~Overrides();
  Overrides(const Overrides&) = delete;
  Overrides& operator=(const Overrides&) = delete;

  using Deadline = std::chrono::steady_clock::time_point;
  // How long after a change's deadline its answer may still be on its way from Redis.
  static constexpr std::chrono::milliseconds kAnswerMargin{500};

  // Sets or removes a key's override, as `change` says (stored in Redis and announced
  // when there is one). An ok Status is success; otherwise it says why the change was not
  // made (a Redis failure's code, `timeout` for a deadline passed), and it never will be.
  // With Redis, the change is made only if Redis runs it before `deadline`: a script
  // compares Redis's own clock (TIME) with the deadline mapped onto it by a TIME read just
  // before, bounded by that read's round trip, so a change that reaches a paused or slow
  // Redis later refuses itself. This blocks until the deadline plus kAnswerMargin at most;
  // no answer by then means not made (an answer delayed longer than kAnswerMargin on its
  // way back would be the only exception, as would Redis's clock stepping back by more
  // than it). Thread-safe.
  Status apply(const OverrideChange& change, Deadline deadline);

  // What submit() calls once the change is made or has failed, with apply()'s outcome.
  using Done = JobQueue::Done;
  // Queues `change` for the writer thread, which makes the changes one after the other in
  // the order they came, as apply() does, and then calls `done` on that thread. Without
  // Redis there is nothing to wait for: the change is made and `done` called before this
  // returns. False when kMaxQueuedChanges wait already: then `done` is never called.
  // The destructor waits for the change being made, if any; those still queued then are
  // not made, and their `done` gets an error saying so. Thread-safe.
  bool submit(OverrideChange change, Deadline deadline, Done done);
  // The same for other admin work that waits on Redis (resetting a key's counts): `job`
  // runs on the writer thread, in turn with the changes, and its outcome goes to `done`.
  // Without Redis it runs before this returns.
  bool submit_job(JobQueue::Job job, Done done);
  static constexpr std::size_t kMaxQueuedChanges = 16;

  const Published<OverrideMap>& current() const noexcept { return current_; }
  // The overrides in force at `now_ms` (Unix ms), by key: a JSON array of
  // Override::to_json objects (GET /admin/overrides, the status page).
  std::string active_json(std::int64_t now_ms) const;
  bool shared() const noexcept { return !redis_.empty(); }
  // Whether the last exchange with Redis succeeded (always true without Redis).
  bool in_sync() const noexcept { return in_sync_.load(std::memory_order_relaxed); }
  std::uint64_t reloads() const noexcept { return reloads_.load(std::memory_order_relaxed); }

  static constexpr std::chrono::milliseconds kRefresh{5000};
  // Expired overrides are deleted from Redis this long after their expiry.
  static constexpr std::chrono::milliseconds kCleanupGrace{60000};

 private:
  void run();              // the subscriber thread
  // Reads the hash and publishes it. False when Redis could not be read.
  bool reload(internal::RedisClient& connection);
  // Runs `body` on the command connection (opened first if need be, within `deadline`).
  Status command(Deadline deadline, const std::function<Status(internal::RedisClient&)>& body);
  // apply()'s Redis part.
  Status write(const OverrideChange& change, Deadline deadline);
  void publish_local(const std::function<void(OverrideMap&)>& change);

  RedisTarget redis_;  // the address; empty: local only
  std::string hash_key_;
  std::string channel_;
  Log log_;
  Published<OverrideMap> current_;
  std::mutex local_mutex_;  // serialises local changes
  std::mutex command_mutex_;
  std::unique_ptr<internal::RedisClient> command_connection_;
  std::atomic<bool> in_sync_{true};
  std::atomic<std::uint64_t> reloads_{0};
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
  // On the writer (with Redis), else made at once.
  bool enqueue(JobQueue::Job job, Done done);
  std::unique_ptr<JobQueue> writer_;  // with Redis: changes and other admin work, in turn
};

}  // namespace ratewin::server
