// Where the Redis store's parts report what happens to the connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratewin/engine.h"
#include "redis/status.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// What to fix when Redis refused this client's credentials (an auth status): the
// password is missing (none was `given`) or wrong. The status's own message otherwise.
std::string credentials_problem(const std::string& where, bool given, const Status& failure);

// Why a store command failed, for the per-reason counts: the Redis error code a message
// names (NOPERM, NOAUTH, WRONGPASS, READONLY, OOM, MISCONF, CLUSTERDOWN, ...; "SCRIPT" for
// an error inside a script), else what the transport said ("timeout", "connect",
// "closed"), else "other".
std::string_view error_reason(std::string_view message) noexcept;

// The options' logger, the latest failure (Stats::last_error), failures counted by reason
// (Stats::store_errors), and whether the store's commands are failing now. Thread-safe:
// every part of the store reports here, from the application threads and the loop thread.
class Reporter {
 public:
  Reporter(std::function<void(LogLevel, std::string_view)> logger, std::string where)
      : logger_(std::move(logger)), where_(std::move(where)) {}

  // The Redis address without its password, for messages.
  const std::string& where() const noexcept { return where_; }
  void log(LogLevel level, const std::string& message) const {
    if (logger_) logger_(level, message);
  }
  // A failure: kept as the latest, counted by its reason, and the store's commands taken
  // as failing until one succeeds. Logged (a warning) the first time its reason and what
  // failed (the message up to its first ':') are seen since the commands last succeeded:
  // once per kind of failure, not once per command.
  // `aside`: a failure its caller logs itself, and that does not make the commands
  // failing (the start's, after which the circuit is open anyway; Redis refusing TIME,
  // after which epochs follow this node's clock): kept and counted only.
  void note_error(const std::string& error, bool aside = false);
  // A command succeeded: the commands are no longer failing (logged when failures were;
  // then the same failures are logged again, at most once per 10 s: a store that fails
  // one command in many does not fill the log). Cheap while they were not: one relaxed
  // load.
  void note_success() {
    if (failing_.load(std::memory_order_relaxed)) recovered();
  }
  // Whether the latest command failed (note_error since the last note_success).
  bool failing() const noexcept { return failing_.load(std::memory_order_relaxed); }
  std::string last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
  }
  // Failures so far by reason (error_reason()), in the order first seen.
  std::vector<std::pair<std::string, std::uint64_t>> errors() const {
    std::lock_guard lock(mutex_);
    return errors_;
  }

 private:
  void recovered();

  const std::function<void(LogLevel, std::string_view)> logger_;
  const std::string where_;
  mutable std::mutex mutex_;
  std::string last_error_;
  // The kinds of failure logged since the commands last succeeded (at most 16).
  std::vector<std::string> logged_;
  std::chrono::steady_clock::time_point forgotten_{};  // logged_ last cleared
  std::vector<std::pair<std::string, std::uint64_t>> errors_;
  std::atomic<bool> failing_{false};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
