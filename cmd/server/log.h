// The server's log: one line per message on stderr, with a UTC time stamp; messages
// below the threshold are dropped. Thread-safe.
#pragma once

#include <string_view>

#include "ratewin/engine.h"

namespace ratewin::server {

void log(LogLevel level, std::string_view message);
// Messages below `level` are dropped from now on (info at start).
void set_log_threshold(LogLevel level);

}  // namespace ratewin::server
