#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

#include "common/json_writer.h"
#include "ratewin_internal/engine_options.h"

namespace ratewin::server {

namespace {

std::atomic<int> log_threshold{static_cast<int>(LogLevel::info)};
std::atomic<LogFormat> log_format{LogFormat::text};

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

bool json_format() { return log_format.load(std::memory_order_relaxed) == LogFormat::json; }

// One line, written whole (one call, so lines of several threads do not mix).
void write(std::string& line) {
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void write_text(LogLevel level, std::string_view body) {
  std::string line = stamp() + " ratewin-server " + std::string(internal::name_of(level)) + ": ";
  line += body;
  write(line);
}

// {"time":...,"level":..., then the members `members` writes}.
template <typename Members>
void write_json(LogLevel level, Members&& members) {
  std::string line;
  JsonWriter w(line);
  w.begin_object();
  w.key("time").string(stamp());
  w.key("level").string(internal::name_of(level));
  members(w);
  w.end_object();
  write(line);
}

}  // namespace

void set_log_threshold(LogLevel level) {
  log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_log_format(LogFormat format) { log_format.store(format, std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) {
  if (dropped(level)) return;
  if (json_format())
    return write_json(level, [&](JsonWriter& w) { w.key("message").string(message); });
  write_text(level, message);
}

void log_event(LogLevel level, std::string_view event, std::span<const LogField> fields) {
  if (dropped(level)) return;
  if (json_format())
    return write_json(level, [&](JsonWriter& w) { write_event(w, event, fields); });
  write_text(level, format_event(LogFormat::text, event, fields));
}

}  // namespace ratewin::server
