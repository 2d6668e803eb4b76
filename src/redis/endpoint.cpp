#include "redis/endpoint.h"

#include <charconv>
#include <stdexcept>

namespace ratewin::inline v1::detail {
namespace {

// The URL with its password (or lone token) replaced by "***": error messages end up in
// logs.
std::string redacted(std::string_view url) {
  const std::size_t scheme = url.find("://");
  const std::size_t at = url.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(url);
  }
  const std::size_t start = scheme + 3;
  const std::size_t colon = url.substr(start, at - start).find(':');
  const std::size_t secret = colon == std::string_view::npos ? start : start + colon + 1;
  return std::string(url.substr(0, secret)) + "***" + std::string(url.substr(at));
}

[[noreturn]] void bad(std::string_view url, const std::string& why) {
  throw std::invalid_argument("ratewin: bad Redis URL '" + redacted(url) + "': " + why);
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int parse_int(std::string_view url, std::string_view text, const char* what, int min, int max) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value < min ||
      value > max) {
    bad(url, std::string(what) + " '" + std::string(text) + "' is not a number from " +
                 std::to_string(min) + " to " + std::to_string(max));
  }
  return value;
}

std::string percent_decode(std::string_view url, std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !is_hex(text[i + 1]) || !is_hex(text[i + 2])) {
      bad(url, "bad percent-encoding in user or password");
    }
    int value = 0;
    std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

// Splits "user:password@rest" into credentials and rest.
std::string_view take_credentials(std::string_view url, std::string_view rest, RedisEndpoint& e) {
  const std::size_t at = rest.rfind('@');
  if (at == std::string_view::npos) return rest;
  const std::string_view credentials = rest.substr(0, at);
  const std::size_t colon = credentials.find(':');
  if (colon == std::string_view::npos) {
    // A lone token is a password (redis://secret@host), as Redis clients read it.
    e.password = percent_decode(url, credentials);
  } else {
    e.user = percent_decode(url, credentials.substr(0, colon));
    e.password = percent_decode(url, credentials.substr(colon + 1));
  }
  return rest.substr(at + 1);
}

}  // namespace

RedisEndpoint RedisEndpoint::parse(std::string_view url) {
  RedisEndpoint e;
  constexpr std::string_view kTcp = "redis://";
  constexpr std::string_view kUnix = "unix://";
  if (url.starts_with(kUnix)) {
    std::string_view rest = take_credentials(url, url.substr(kUnix.size()), e);
    const std::size_t query = rest.find('?');
    if (query != std::string_view::npos) {
      const std::string_view params = rest.substr(query + 1);
      rest = rest.substr(0, query);
      if (!params.starts_with("db=")) bad(url, "the only parameter is db=N");
      e.db = parse_int(url, params.substr(3), "db", 0, 1 << 20);
    }
    if (rest.empty() || rest[0] != '/') bad(url, "a Unix socket path must be absolute");
    e.unix_path = std::string(rest);
    return e;
  }
  if (!url.starts_with(kTcp)) bad(url, "it must start with redis:// or unix://");
  std::string_view rest = take_credentials(url, url.substr(kTcp.size()), e);
  const std::size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) e.db = parse_int(url, db, "db", 0, 1 << 20);
    rest = rest.substr(0, slash);
  }
  std::string_view port;
  if (rest.starts_with('[')) {
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) bad(url, "unclosed [ in the host");
    e.host = std::string(rest.substr(1, close - 1));
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') bad(url, "expected :port after ]");
      port = after.substr(1);
    }
  } else {
    const std::size_t colon = rest.rfind(':');
    e.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = rest.substr(colon + 1);
  }
  if (e.host.empty()) bad(url, "no host");
  if (!port.empty()) e.port = parse_int(url, port, "port", 1, 65535);
  return e;
}

std::vector<std::vector<std::string>> RedisEndpoint::login_commands() const {
  std::vector<std::vector<std::string>> commands;
  if (authenticates()) {
    if (user.empty()) {
      commands.push_back({"AUTH", password});
    } else {
      commands.push_back({"AUTH", user, password});
    }
  }
  if (db != 0) commands.push_back({"SELECT", std::to_string(db)});
  return commands;
}

std::string RedisEndpoint::describe() const {
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on a chain of
  // std::string operator+ here.
  std::string out = unix_path.empty() ? "redis://" : "unix://";
  if (!user.empty()) {
    out += user;
    out += '@';
  }
  if (!unix_path.empty()) {
    out += unix_path;
    if (db != 0) {
      out += "?db=";
      out += std::to_string(db);
    }
    return out;
  }
  const bool v6 = host.find(':') != std::string::npos;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  if (db != 0) {
    out += '/';
    out += std::to_string(db);
  }
  return out;
}

}  // namespace ratewin::inline v1::detail
