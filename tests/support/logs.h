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

  std::function<void(LogLevel, std::string_view)> sink() {
    return [this](LogLevel, std::string_view line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(line);
    };
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
