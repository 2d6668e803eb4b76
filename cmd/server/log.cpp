#include "log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace ratewin::server {

namespace {

std::atomic<int> log_threshold{static_cast<int>(LogLevel::info)};

}  // namespace

void set_log_threshold(LogLevel level) {
  log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

void log(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) < log_threshold.load(std::memory_order_relaxed)) return;
  static constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s ratewin-server %s: %.*s\n", stamp, kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace ratewin::server
