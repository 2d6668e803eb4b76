#include "http/path.h"

#include <algorithm>

#include "common/text.h"

namespace ratewin::server {

namespace {

// Merges repeated '/' and resolves "." and ".." in `path` (decoded, so every '/' in it
// separates segments), into `out`.
void remove_dot_segments(std::string_view path, std::string& out) {
  out.clear();
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
}

// Decodes `path` into `out` (see normalise_path); "" or the problem.
std::string_view decode(std::string_view path, std::string& out) {
  out.clear();
  out.reserve(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '%') {
      const int high = i + 2 < path.size() ? hex_digit(path[i + 1]) : -1;
      const int low = i + 2 < path.size() ? hex_digit(path[i + 2]) : -1;
      if (high < 0 || low < 0) return "invalid percent-encoding in the path";
      const auto byte = static_cast<unsigned char>(high * 16 + low);
      i += 2;
      if (byte == '/' || byte == '\\') return "an encoded '/' or '\\' in the path";
      if (byte == ';') return "an encoded ';' in the path";
      if (byte < 0x20 || byte == 0x7f) return "an encoded control character in the path";
      out += static_cast<char>(byte);
      continue;
    }
    if (c == ';') return "path parameters (';') are not accepted";
    if (c == '\\') return "'\\' in the path";
    if (c == '#') return "a fragment ('#') in the request target";
    if (c < 0x21 || c > 0x7e) return "a byte in the path that a request target cannot hold";
    out += c;
  }
  // Only decoding made bytes above 0x7f: they must be UTF-8 (no overlong forms).
  for (std::size_t i = 0; i < out.size();) {
    const std::size_t n = utf8_length(out, i);
    if (n == 0) return "a decoded path that is not UTF-8";
    i += n;
  }
  return {};
}

// Appends `decoded` to `out`, encoding again what a path cannot hold as it is.
void encode(std::string_view decoded, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out.clear();
  out.reserve(decoded.size());
  for (const char c : decoded) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f || c == '%' || c == '#' || c == '?') {
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
}

}  // namespace

bool normalise_path(std::string_view path, std::string& out, std::string_view& problem) {
  if (path.empty() || path.front() != '/') {
    out.clear();
    problem = "the path does not start with '/'";
    return false;
  }
  if (path.find_first_of("%?") == std::string_view::npos) {
    // Nothing to decode or encode (the common case): checked where it is.
    for (const char c : path) {
      if (c == ';' || c == '\\' || c == '#' || c < 0x21 || c > 0x7e) {
        std::string ignored;
        problem = decode(path, ignored);  // says which
        out.clear();
        return false;
      }
    }
    remove_dot_segments(path, out);
    return true;
  }
  std::string decoded;
  problem = decode(path, decoded);
  if (!problem.empty()) {
    out.clear();
    return false;
  }
  std::string encoded;
  encode(decoded, encoded);
  remove_dot_segments(encoded, out);
  return true;
}

void loose_path(std::string_view path, std::string& out) {
  out.clear();
  std::size_t at = 0;
  while (at < path.size()) {
    // path[at] is '/': one segment, up to the next '/' (or the end).
    std::size_t end = path.find('/', at + 1);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(at + 1, end - at - 1);
    for (;;) {
      if (segment.ends_with('.')) {
        segment.remove_suffix(1);
      } else if (segment.ends_with("%20")) {
        segment.remove_suffix(3);
      } else {
        break;
      }
    }
    // (An empty segment is kept only as the path's last: its trailing '/'.)
    if (!segment.empty() || end == path.size()) {
      out += '/';
      for (const char c : segment) out += c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    }
    at = end;
  }
  if (out.empty()) out.push_back('/');  // (not out = "/": a false GCC 12 -Wrestrict)
}

}  // namespace ratewin::server
