// The server's log: one line per message on stderr, with a UTC time stamp, as text or
// JSON; messages below the threshold are dropped. Thread-safe.
#pragma once

#include <span>
#include <string_view>

#include "common/log_event.h"
#include "ratewin/engine.h"

namespace ratewin::server {

void log(LogLevel level, std::string_view message);
// A structured line (log_event.h): an event and its fields.
void log_event(LogLevel level, std::string_view event, std::span<const LogField> fields);
// Messages below `level` are dropped from now on (info at start).
void set_log_threshold(LogLevel level);
// Lines are text (at start) or JSON objects from now on: {"time":...,"level":...,
// "message":...} or, for an event, its fields in place of "message".
void set_log_format(LogFormat format);

}  // namespace ratewin::server
