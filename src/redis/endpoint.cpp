#include "redis/endpoint.h"

#include <charconv>
#include <stdexcept>

namespace ratewin::inline v1::detail {
namespace {

// The URL with its password (or lone token) replaced by "***": error messages end up in
// logs.
std::string redacted(std::string_view url) {
  // A sentinel password in the parameters first.
  constexpr std::string_view kSentinelSecret = "sentinel_password=";
  const std::size_t param = url.find(kSentinelSecret);
  if (param != std::string_view::npos) {
    const std::size_t from = param + kSentinelSecret.size();
    const std::size_t end = url.find('&', from);
    std::string out = redacted(url.substr(0, param));
    out += kSentinelSecret;
    out += "***";
    if (end != std::string_view::npos) out += redacted(url.substr(end));
    return out;
  }
  const std::size_t scheme = url.find("://");
  const std::size_t at = url.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(url);
  }
  const std::size_t start = scheme + 3;
  const std::size_t colon = url.substr(start, at - start).find(':');
  const std::size_t secret = colon == std::string_view::npos ? start : start + colon + 1;
  std::string out(url.substr(0, secret));
  out += "***";
  out += url.substr(at);
  return out;
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

// "host[:port]" or "[v6 address][:port]" into e.host and e.port.
void parse_host_port(std::string_view url, std::string_view rest, RedisEndpoint& e) {
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
}

// A comma-separated list of host[:port], each with the credentials of `login`.
std::vector<RedisEndpoint> parse_hosts(std::string_view url, std::string_view list,
                                       const RedisEndpoint& login, int default_port) {
  std::vector<RedisEndpoint> out;
  while (true) {
    const std::size_t comma = list.find(',');
    RedisEndpoint e = login;
    e.port = default_port;
    parse_host_port(url, list.substr(0, comma), e);
    out.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
  }
  return out;
}

}  // namespace

std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  std::string out;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

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
  if (url.starts_with("rediss://") || url.starts_with("rediss-")) {
    bad(url, "TLS (rediss://) is not supported: this build's hiredis has no TLS; reach Redis "
             "through a TLS tunnel (stunnel, spiped, a sidecar) with a redis:// URL");
  }
  if (!url.starts_with(kTcp)) bad(url, "it must start with redis://, unix://, redis-cluster:// or redis-sentinel://");
  std::string_view rest = take_credentials(url, url.substr(kTcp.size()), e);
  const std::size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) e.db = parse_int(url, db, "db", 0, 1 << 20);
    rest = rest.substr(0, slash);
  }
  parse_host_port(url, rest, e);
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
  out += host_port(host, port);
  if (db != 0) {
    out += '/';
    out += std::to_string(db);
  }
  return out;
}

}  // namespace ratewin::inline v1::detail

namespace ratewin::inline v1::detail {

RedisAddress RedisAddress::parse(std::string_view url) {
  constexpr std::string_view kCluster = "redis-cluster://";
  constexpr std::string_view kSentinel = "redis-sentinel://";
  RedisAddress a;
  if (url.starts_with(kCluster)) {
    a.kind = Kind::kCluster;
    RedisEndpoint login;
    std::string_view rest = take_credentials(url, url.substr(kCluster.size()), login);
    if (rest.ends_with('/')) rest.remove_suffix(1);
    if (rest.find_first_of("/?") != std::string_view::npos) {
      bad(url, "a cluster has no database number or parameters (only db 0 exists there)");
    }
    if (rest.empty()) bad(url, "no seed node");
    a.servers = parse_hosts(url, rest, login, 6379);
    a.login = std::move(login);
    return a;
  }
  if (url.starts_with(kSentinel)) {
    a.kind = Kind::kSentinel;
    RedisEndpoint login;
    std::string_view rest = url.substr(kSentinel.size());
    const std::size_t slash = rest.find('/');
    if (slash == std::string_view::npos) bad(url, "no /master-name after the sentinels");
    std::string_view hosts = take_credentials(url, rest.substr(0, slash), login);
    std::string_view tail = rest.substr(slash + 1);
    const std::size_t query = tail.find('?');
    a.master_name = percent_decode(url, tail.substr(0, query));
    if (a.master_name.empty()) bad(url, "no master name");
    RedisEndpoint sentinel_login;
    if (query != std::string_view::npos) {
      std::string_view params = tail.substr(query + 1);
      while (!params.empty()) {
        const std::size_t amp = params.find('&');
        const std::string_view param = params.substr(0, amp);
        const std::size_t eq = param.find('=');
        const std::string_view name = param.substr(0, eq);
        const std::string_view value =
            eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1);
        if (name == "sentinel_password") {
          sentinel_login.password = percent_decode(url, value);
        } else if (name == "sentinel_user") {
          sentinel_login.user = percent_decode(url, value);
        } else if (name == "db") {
          login.db = parse_int(url, value, "db", 0, 1 << 20);
        } else {
          bad(url, "unknown parameter '" + std::string(name) +
                       "' (known: sentinel_password, sentinel_user, db)");
        }
        if (amp == std::string_view::npos) break;
        params = params.substr(amp + 1);
      }
    }
    if (hosts.empty()) bad(url, "no sentinel");
    a.servers = parse_hosts(url, hosts, sentinel_login, 26379);
    a.login = std::move(login);
    return a;
  }
  a.login = RedisEndpoint::parse(url);
  a.servers = {a.login};
  return a;
}

RedisEndpoint RedisAddress::node(std::string host, int port) const {
  RedisEndpoint e = login;
  e.unix_path.clear();
  e.host = std::move(host);
  e.port = port;
  return e;
}

std::string RedisAddress::describe() const {
  if (kind == Kind::kSingle) return login.describe();
  std::string out = kind == Kind::kCluster ? "redis-cluster://" : "redis-sentinel://";
  if (!login.user.empty()) {
    out += login.user;
    out += '@';
  }
  for (std::size_t i = 0; i < servers.size(); ++i) {
    if (i > 0) out += ',';
    out += host_port(servers[i].host, servers[i].port);
  }
  if (kind == Kind::kSentinel) {
    out += '/';
    out += master_name;
  }
  return out;
}

}  // namespace ratewin::inline v1::detail
