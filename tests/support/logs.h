// What an engine logs, collected for a test to look through (Options::logger = sink()).
#pragma once

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ratewin/engine.h"

namespace ratewin::test {

struct Logs {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::vector<LogLevel> levels;  // each line's

  std::function<void(LogLevel, std::string_view)> sink() {
    return [this](LogLevel level, std::string_view line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(line);
      levels.push_back(level);
    };
  }
  // Whether a line at `level` holds `needle`.
  bool contain_at(LogLevel level, std::string_view needle) {
    std::lock_guard lock(mutex);
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (levels[i] == level && lines[i].find(needle) != std::string::npos) return true;
    return false;
  }
  // How many lines hold `needle`.
  int count(std::string_view needle) {
    std::lock_guard lock(mutex);
    return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(needle) != std::string::npos;
    }));
  }
  bool contain(std::string_view needle) { return count(needle) > 0; }
};

}  // namespace ratewin::test
