#include "log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

#include "text.h"

namespace ratewin::server {

namespace {

std::atomic<int> log_threshold{static_cast<int>(LogLevel::info)};
std::atomic<LogFormat> log_format{LogFormat::text};

constexpr const char* kNames[] = {"debug", "info", "warning", "error"};

bool dropped(LogLevel level) {
  return static_cast<int>(level) < log_threshold.load(std::memory_order_relaxed);
}

std::string stamp() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// One line, written whole (one call, so lines of several threads do not mix).
void write(LogLevel level, std::string_view text_body, std::string_view json_members) {
  std::string line;
  if (log_format.load(std::memory_order_relaxed) == LogFormat::json) {
    line = "{\"time\":\"" + stamp() + "\",\"level\":\"" + kNames[static_cast<int>(level)] + "\",";
    line += json_members;
    line += "}\n";
  } else {
    line = stamp() + " ratewin-server " + kNames[static_cast<int>(level)] + ": ";
    line += text_body;
    line += '\n';
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

void set_log_threshold(LogLevel level) {
  log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_log_format(LogFormat format) { log_format.store(format, std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) {
  if (dropped(level)) return;
  if (log_format.load(std::memory_order_relaxed) == LogFormat::json) {
    std::string members = "\"message\":";
    append_json_string(members, message);
    return write(level, {}, members);
  }
  write(level, message, {});
}

void log_event(LogLevel level, std::string_view event, std::span<const LogField> fields) {
  if (dropped(level)) return;
  const LogFormat format = log_format.load(std::memory_order_relaxed);
  const std::string body = format_event(format, event, fields);
  write(level, format == LogFormat::text ? body : std::string_view(),
        format == LogFormat::json ? body : std::string_view());
}

}  // namespace ratewin::server
