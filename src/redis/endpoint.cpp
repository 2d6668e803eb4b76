#include "redis/endpoint.h"

#include <charconv>
#include <functional>
#include <stdexcept>
#include <utility>

#include "internal/ratewin_internal/engine_options.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
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
  const std::size_t at = url.substr(0, url.find('?')).rfind('@');
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

// `what`: where the text is, for the error (never the text: it may be a secret).
std::string percent_decode(std::string_view url, std::string_view text,
                           std::string_view what = "user or password") {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !is_hex(text[i + 1]) || !is_hex(text[i + 2])) {
      bad(url, "bad percent-encoding in " + std::string(what));
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
  // (Before the parameters, whose values may hold an '@' of their own.)
  const std::size_t at = rest.substr(0, rest.find('?')).rfind('@');
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

// Each "name=value" of a query ("a=1&b=2"), its value percent-decoded, to `take`, which
// returns false for a name it does not know; then `known` lists the names for the error.
void for_each_param(std::string_view url, std::string_view query,
                    const std::function<bool(std::string_view, std::string)>& take,
                    const std::string& known) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    const std::size_t eq = param.find('=');
    const std::string_view name = param.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1);
    if (!take(name, percent_decode(url, value, "parameter '" + std::string(name) + "'"))) {
      bad(url, "unknown parameter '" + std::string(name) + "'" +
                   (known.empty() ? std::string(" (it takes none)") : " (known: " + known + ")"));
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
}

constexpr std::string_view kTlsParamNames =
    "tls_ca_file, tls_ca_dir, tls_cert_file, tls_key_file, tls_server_name, tls_verify, "
    "tls_min_version";

// The names a URL knows: `plain`, and the TLS parameters when it is `secure`.
std::string known_params(std::string_view plain, bool secure) {
  std::string out(plain);
  if (secure) {
    if (!out.empty()) out += ", ";
    out += kTlsParamNames;
  }
  return out;
}

// `params`' TLS parameter `name` (when `secure`): false when it is not one. A TLS
// parameter on a plain URL is an error of its own.
bool take_tls(std::string_view url, bool secure, TlsParams& params, std::string_view name,
              std::string value) {
  if (!name.starts_with("tls_")) return false;
  if (!secure) bad(url, "'" + std::string(name) + "' needs TLS: use a rediss scheme");
  return params.take(name, std::move(value), [url](const std::string& why) { bad(url, why); });
}

// Splits "scheme://rest": the rest when `url` starts with `plain` or its TLS form
// (plain with "rediss" for "redis"), with `secure` set for the latter.
std::optional<std::string_view> after_scheme(std::string_view url, std::string_view plain,
                                             bool& secure) {
  if (url.starts_with(plain)) {
    secure = false;
    return url.substr(plain.size());
  }
  const std::string tls = "rediss" + std::string(plain.substr(5));  // plain starts "redis"
  if (url.starts_with(tls)) {
    secure = true;
    return url.substr(tls.size());
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> tls_version(std::string_view text) noexcept {
  if (text.starts_with("TLSv")) text.remove_prefix(4);
  if (text == "1.2") return 0x0303;
  if (text == "1.3") return 0x0304;
  return std::nullopt;
}

std::string_view verify_name(TlsVerify verify) noexcept {
  const std::string_view name = internal::name_of(verify);
  return name.empty() ? internal::name_of(TlsVerify::full) : name;
}

std::optional<TlsVerify> parse_verify(std::string_view name) noexcept {
  return internal::parse_name<TlsVerify>(internal::kTlsVerifyNames, name);
}

bool TlsParams::take(std::string_view name, std::string value,
                     const std::function<void(const std::string&)>& bad) {
  if (name == "tls_ca_file") {
    ca_file = std::move(value);
  } else if (name == "tls_ca_dir") {
    ca_dir = std::move(value);
  } else if (name == "tls_cert_file") {
    cert_file = std::move(value);
  } else if (name == "tls_key_file") {
    key_file = std::move(value);
  } else if (name == "tls_server_name") {
    server_name = std::move(value);
  } else if (name == "tls_verify") {
    verify = parse_verify(value);
    if (!verify) bad("tls_verify '" + value + "' is not " +
                      internal::choices<TlsVerify>(internal::kTlsVerifyNames));
  } else if (name == "tls_min_version") {
    if (!tls_version(value)) bad("tls_min_version '" + value + "' is not " + internal::choices(internal::kTlsVersions));
    min_version = std::move(value);
  } else {
    return false;
  }
  return true;
}

TlsOptions TlsParams::over(TlsOptions base) const {
  if (ca_file) base.ca_file = *ca_file;
  if (ca_dir) base.ca_dir = *ca_dir;
  if (cert_file) base.cert_file = *cert_file;
  if (key_file) base.key_file = *key_file;
  if (server_name) base.server_name = *server_name;
  if (min_version) base.min_version = *min_version;
  if (verify) base.verify = *verify;
  return base;
}

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

RedisEndpoint RedisEndpoint::parse(std::string_view url, TlsParams* tls) {
  RedisEndpoint e;
  constexpr std::string_view kUnix = "unix://";
  if (url.starts_with(kUnix)) {
    std::string_view rest = take_credentials(url, url.substr(kUnix.size()), e);
    const std::size_t query = rest.find('?');
    if (query != std::string_view::npos) {
      for_each_param(
          url, rest.substr(query + 1),
          [&](std::string_view name, const std::string& value) {
            if (name.starts_with("tls_")) bad(url, "TLS is not spoken over a Unix socket");
            if (name != "db") return false;
            e.db = parse_int(url, value, "db", 0, 1 << 20);
            return true;
          },
          "db");
      rest = rest.substr(0, query);
    }
    if (rest.empty() || rest[0] != '/') bad(url, "a Unix socket path must be absolute");
    e.unix_path = std::string(rest);
    return e;
  }
  bool secure = false;
  const std::optional<std::string_view> after = after_scheme(url, "redis://", secure);
  if (!after) {
    bad(url, "it must start with redis://, rediss://, unix://, redis-cluster://, "
             "rediss-cluster://, redis-sentinel:// or rediss-sentinel://");
  }
  e.secure = secure;
  std::string_view rest = take_credentials(url, *after, e);
  const std::size_t query = rest.find('?');
  if (query != std::string_view::npos) {
    TlsParams ignored;
    TlsParams& params = tls != nullptr ? *tls : ignored;
    for_each_param(
        url, rest.substr(query + 1),
        [&](std::string_view name, std::string value) {
          if (name != "db") return take_tls(url, secure, params, name, std::move(value));
          e.db = parse_int(url, value, "db", 0, 1 << 20);
          return true;
        },
        known_params("db", secure));
    rest = rest.substr(0, query);
  }
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

std::string login_failure_hint(const RedisEndpoint& endpoint, const Status& failure) {
  const bool broken =
      failure.code() == Status::Code::io || failure.code() == Status::Code::protocol;
  if (!broken || endpoint.secure || !endpoint.unix_path.empty()) return {};
  return " (if that is Redis' TLS port, use rediss://)";
}

std::string RedisEndpoint::describe() const {
  // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict) on a chain of
  // std::string operator+ here.
  std::string out = !unix_path.empty() ? "unix://" : secure ? "rediss://" : "redis://";
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

}  // namespace detail
}  // namespace v1
}  // namespace ratewin

namespace ratewin {
inline namespace v1 {
namespace detail {

RedisAddress RedisAddress::parse(std::string_view url) {
  RedisAddress a;
  bool secure = false;
  if (const auto after = after_scheme(url, "redis-cluster://", secure)) {
    a.kind = Kind::kCluster;
    a.secure = secure;
    RedisEndpoint login;
    login.secure = secure;
    std::string_view rest = take_credentials(url, *after, login);
    const std::size_t query = rest.find('?');
    if (query != std::string_view::npos) {
      for_each_param(
          url, rest.substr(query + 1),
          [&](std::string_view name, std::string value) {
            return take_tls(url, secure, a.tls_params, name, std::move(value));
          },
          known_params("", secure));
      rest = rest.substr(0, query);
    }
    if (rest.ends_with('/')) rest.remove_suffix(1);
    if (rest.find('/') != std::string_view::npos) {
      bad(url, "a cluster has no database number (only db 0 exists there)");
    }
    if (rest.empty()) bad(url, "no seed node");
    a.servers = parse_hosts(url, rest, login, 6379);
    a.login = std::move(login);
    return a;
  }
  if (const auto after = after_scheme(url, "redis-sentinel://", secure)) {
    a.kind = Kind::kSentinel;
    a.secure = secure;
    RedisEndpoint login;
    login.secure = secure;
    std::string_view rest = *after;
    const std::size_t slash = rest.find('/');
    if (slash == std::string_view::npos) bad(url, "no /master-name after the sentinels");
    std::string_view hosts = take_credentials(url, rest.substr(0, slash), login);
    std::string_view tail = rest.substr(slash + 1);
    const std::size_t query = tail.find('?');
    a.master_name = percent_decode(url, tail.substr(0, query), "the master name");
    if (a.master_name.empty()) bad(url, "no master name");
    RedisEndpoint sentinel_login;
    sentinel_login.secure = secure;
    if (query != std::string_view::npos) {
      for_each_param(
          url, tail.substr(query + 1),
          [&](std::string_view name, std::string value) {
            if (name == "sentinel_password") {
              sentinel_login.password = std::move(value);
            } else if (name == "sentinel_user") {
              sentinel_login.user = std::move(value);
            } else if (name == "db") {
              login.db = parse_int(url, value, "db", 0, 1 << 20);
            } else {
              return take_tls(url, secure, a.tls_params, name, std::move(value));
            }
            return true;
          },
          known_params("sentinel_password, sentinel_user, db", secure));
    }
    if (hosts.empty()) bad(url, "no sentinel");
    a.servers = parse_hosts(url, hosts, sentinel_login, 26379);
    a.login = std::move(login);
    return a;
  }
  a.login = RedisEndpoint::parse(url, &a.tls_params);
  a.secure = a.login.secure;
  a.servers = {a.login};
  return a;
}

void RedisAddress::use_tls(const std::shared_ptr<TlsContext>& context) {
  login.tls = context;
  for (RedisEndpoint& server : servers) server.tls = context;
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
  if (secure) out.insert(5, "s");
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

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
