// Structured log lines: an event's name and its fields, which the server's log writes as
// text (`event: name=value ...`) or as one JSON object (--log-format json). Parts of the
// server that report events take an EventLog, so tests can read the fields themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "ratewin/engine.h"  // LogLevel

namespace ratewin::server {

struct LogField {
  std::string_view name;
  std::variant<std::string_view, std::int64_t, double> value;
};

using EventLog = std::function<void(LogLevel, std::string_view event, std::span<const LogField>)>;

enum class LogFormat { text, json };

// The line of an event, without time stamp and level: for text, `event: name=value ...`
// (a text value quoted when it is empty or holds a space, a quote, '=' or a control
// character); for JSON, the object's members after the caller's own
// (`"event":...,"name":value,...`).
std::string format_event(LogFormat format, std::string_view event, std::span<const LogField> fields);

class JsonWriter;
// The JSON members alone, written by `w` into the object it is in (or as a list of
// members when it is in none).
void write_event(JsonWriter& w, std::string_view event, std::span<const LogField> fields);

}  // namespace ratewin::server
