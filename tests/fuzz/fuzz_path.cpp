// libFuzzer target for request targets and paths (target.h, path.h) and globs: any bytes
// either parse or are refused; what parses must hold these invariants, else it is a bug:
//   - a normalised path starts with '/', holds only bytes a request target can carry,
//     has no empty, "." or ".." segment, and normalising it again changes nothing;
//   - an accepted path spelled otherwise (every byte percent-encoded, hex digits in
//     either case) is accepted too and normalises to the same;
//   - a target that parses yields a normalised path (or "*", for OPTIONS).
//   - a path's loose form (loose_path) starts with '/', has no upper-case letter and no
//     segment ending in '.' or "%20", and is its own loose form;
//   - a glob list matched through its index (GlobSet) finds what walking it finds.
// Input: first line a path or target, second line a pattern and a text for the globs;
// the lines after it a glob list, tried on the first two lines.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/glob_set.h"
#include "http/path.h"
#include "http/target.h"

namespace {

using ratewin::server::glob_match;
using ratewin::server::normalise_path;
using ratewin::server::parse_target;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// `path` with every byte outside its %XX triplets encoded, in upper or lower case.
std::string respelled(std::string_view path, bool lower) {
  const char* hex = lower ? "0123456789abcdef" : "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const auto byte = static_cast<unsigned char>(path[i]);
    if (byte == '%' && i + 2 < path.size()) {
      out += path.substr(i, 3);  // an escape stays one (its case is the input's)
      i += 2;
    } else if (byte == '/') {
      out += '/';
    } else {
      out += '%';
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    }
  }
  return out;
}

void check_normalised(std::string_view path) {
  std::string again;
  std::string_view problem;
  check(!path.empty() && path.front() == '/');
  for (const char c : path) check(c > 0x20 && c < 0x7f && c != '#' && c != '?' && c != ';');
  check(path.find("//") == std::string_view::npos);
  check(path.find("/./") == std::string_view::npos && path.find("/../") == std::string_view::npos);
  check(!path.ends_with("/.") && !path.ends_with("/.."));
  check(normalise_path(path, again, problem) && again == path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string_view first = bytes.substr(0, bytes.find('\n'));

  std::string out;
  std::string_view problem;
  const bool ok = normalise_path(first, out, problem);
  check(ok == problem.empty());
  if (ok) {
    check_normalised(out);
    std::string loose;
    ratewin::server::loose_path(out, loose);
    check(!loose.empty() && loose.front() == '/');
    for (const char c : loose) check(!(c >= 'A' && c <= 'Z'));
    check(loose.find("./") == std::string::npos && loose.find("%20/") == std::string::npos);
    check(!loose.ends_with('.') && !loose.ends_with("%20"));
    std::string again;
    ratewin::server::loose_path(loose, again);
    check(again == loose);
  }
  // Another spelling of an accepted path: accepted too, as the same path. (Not the other
  // way round: a raw space or '#' is refused where "%20" and "%23" are not.)
  if (ok) {
    for (const bool lower : {false, true}) {
      std::string other;
      check(normalise_path(respelled(first, lower), other, problem) && other == out);
    }
  }

  std::string path;
  std::string query;
  for (const std::string_view method : {"GET", "OPTIONS"}) {
    if (parse_target(method, first, path, query).empty()) {
      if (path == "*") {
        check(method == "OPTIONS" && first == "*");
      } else {
        check_normalised(path);
      }
    }
  }
  (void)ratewin::server::valid_authority(first);

  const std::string_view rest = first.size() < bytes.size() ? bytes.substr(first.size() + 1) : "";
  const std::string_view second = rest.substr(0, rest.find('\n'));
  (void)glob_match(first, second);
  check(glob_match(second, second));  // '*' and '?' match themselves too

  std::vector<std::string> globs;
  ratewin::server::GlobSet set;
  std::string_view lines = second.size() < rest.size() ? rest.substr(second.size() + 1) : "";
  while (!lines.empty() && globs.size() < 16) {
    const std::string_view line = lines.substr(0, lines.find('\n'));
    globs.emplace_back(line);
    set.add(std::string(line));
    lines = line.size() < lines.size() ? lines.substr(line.size() + 1) : "";
  }
  for (const std::string_view text : {first, second}) {
    std::size_t walked = 0;
    while (walked < globs.size() && !glob_match(globs[walked], text)) ++walked;
    const std::optional<std::size_t> found = set.first(text);
    check(found ? *found == walked : walked == globs.size());
    check(set.any(text) == found.has_value());
  }
  return 0;
}
