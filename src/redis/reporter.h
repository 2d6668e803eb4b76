// Where the Redis store's parts report what happens to the connection.
#pragma once

#include <mutex>
#include <string>
#include <utility>

#include "ratewin/engine.h"

namespace ratewin::inline v1::detail {

// When `error` (a failure's text, which may quote Redis's reply) says that Redis refused
// this client's credentials (NOAUTH, WRONGPASS, or an older server's "invalid
// password"), the message to give instead, which says what to fix; empty otherwise.
std::string credentials_problem(const std::string& where, const std::string& error);

// The options' logger and the latest failure (Stats::last_error). Thread-safe: every part
// of the store reports here, from the application threads and the loop thread.
class Reporter {
 public:
  Reporter(std::function<void(LogLevel, std::string_view)> logger, std::string where)
      : logger_(std::move(logger)), where_(std::move(where)) {}

  // The Redis address without its password, for messages.
  const std::string& where() const noexcept { return where_; }
  void log(LogLevel level, const std::string& message) const {
    if (logger_) logger_(level, message);
  }
  void note_error(std::string error) {
    std::lock_guard lock(mutex_);
    last_error_ = std::move(error);
  }
  std::string last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
  }

 private:
  const std::function<void(LogLevel, std::string_view)> logger_;
  const std::string where_;
  mutable std::mutex mutex_;
  std::string last_error_;
};

}  // namespace ratewin::inline v1::detail
