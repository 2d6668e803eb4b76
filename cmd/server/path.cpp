#include "path.h"

#include <algorithm>

namespace ratewin::server {

std::string remove_dot_segments(std::string_view path) {
  std::string out;
  out.reserve(path.size() + 1);
  bool trailing = false;  // whether the result ends in a directory ("/a/", "/a/b/..")
  std::size_t i = 0;
  while (i < path.size()) {
    const std::size_t end = std::min(path.find('/', i), path.size());
    const std::string_view segment = path.substr(i, end - i);
    i = end + 1;
    trailing = end == path.size() - 1;
    if (segment.empty()) continue;
    if (segment == ".") {
      trailing = true;
    } else if (segment == "..") {
      out.erase(out.empty() ? 0 : out.rfind('/'));
      trailing = true;
    } else {
      out += '/';
      out += segment;
    }
  }
  if (out.empty() || trailing) out += '/';
  return out;
}

std::string normalise_path(std::string_view target) {
  return remove_dot_segments(target.substr(0, std::min(target.find_first_of("?#"), target.size())));
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // On a mismatch, backtrack to the latest '*' and let it swallow one more byte; earlier
  // stars never need revisiting, which bounds the work by pattern * text.
  std::size_t p = 0;
  std::size_t t = 0;
  std::size_t star = std::string_view::npos;
  std::size_t star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace ratewin::server
