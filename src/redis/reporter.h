// Where the Redis store's parts report what happens to the connection.
#pragma once

#include <mutex>
#include <string>
#include <utility>

#include "ratewin/engine.h"
#include "redis/status.h"

namespace ratewin::inline v1::detail {

// What to fix when Redis refused this client's credentials (an auth status): the
// password is missing (none was `given`) or wrong. The status's own message otherwise.
std::string credentials_problem(const std::string& where, bool given, const Status& failure);

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
