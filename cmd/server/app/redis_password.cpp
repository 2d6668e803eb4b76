#include "app/redis_password.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace ratewin::server {

Result<std::string> read_password_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid("cannot read " + path + ": " + std::strerror(errno));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return invalid("cannot read " + path);
  if (content.ends_with('\n')) content.pop_back();
  if (content.ends_with('\r')) content.pop_back();
  if (content.empty()) return invalid(path + " holds no password");
  return content;
}

std::string percent_encode(std::string_view text) {
  constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~';
    if (unreserved) {
      out += c;
      continue;
    }
    const auto byte = static_cast<unsigned char>(c);
    out += '%';
    out += kHex[byte >> 4];
    out += kHex[byte & 0xF];
  }
  return out;
}

Result<std::string> with_redis_password(std::string_view url, std::string_view password) {
  const std::size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos || scheme_end == 0)
    return invalid("the Redis URL has no scheme (redis://, rediss://, unix://, ...)");
  const std::string_view scheme = url.substr(0, scheme_end);
  const std::string_view rest = url.substr(scheme_end + 3);
  // Where the credentials end, found as the library finds them: the last '@' before the
  // master name of a Sentinel address, else the last '@' (a password percent-encoded
  // has none).
  std::string_view searched = rest;
  if (scheme == "redis-sentinel" || scheme == "rediss-sentinel") {
    searched = rest.substr(0, rest.find('/'));
  }
  const std::size_t at = searched.rfind('@');
  std::string_view user;
  std::string_view after = rest;
  if (at != std::string_view::npos) {
    const std::string_view credentials = rest.substr(0, at);
    const std::size_t colon = credentials.find(':');
    if (colon != std::string_view::npos && colon + 1 < credentials.size()) {
      return invalid(
          "the Redis URL already holds a password: give it there or in the password file "
          "(or RATEWIN_REDIS_PASSWORD), not both");
    }
    user = credentials.substr(0, colon);
    after = rest.substr(at + 1);
  }
  std::string out(url.substr(0, scheme_end + 3));
  out += user;
  out += ':';
  out += percent_encode(password);
  out += '@';
  out += after;
  return out;
}

}  // namespace ratewin::server
