// rules_error.h: a problem with a YAML source the server reads (the rules file, and
// envoyproxy/ratelimit's configuration files for the RLS listener), at a line when it has
// one. The YAML readers throw it from wherever the problem is found; the loads catch it
// (docs/architecture.md, "Errors, one convention": the one exception inside the server,
// for the location it carries).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace ratewin::server {

// Any problem with a rules file. what() is "<source>:<line>:<column>: <problem>" with a
// 1-based position, or "<source>: <problem>" when there is none (line and column 0).
struct RulesError : std::runtime_error {
  RulesError(std::string source, int line_, int column_, std::string problem_)
      : std::runtime_error(located(std::move(source), line_, column_, problem_)),
        line(line_),
        column(column_),
        problem(std::move(problem_)) {}
  int line;
  int column;
  std::string problem;  // without the source and position

 private:
  static std::string located(std::string source, int at_line, int at_column,
                             const std::string& what) {
    if (at_line > 0) source += ":" + std::to_string(at_line) + ":" + std::to_string(at_column);
    return source + ": " + what;
  }
};

}  // namespace ratewin::server
