// Where a Redis server is and how to log in to it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratewin/engine.h"
#include "redis/status.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

class TlsContext;

// The names of TlsVerify's values, as URLs, flags and messages write them.
std::string_view verify_name(TlsVerify verify) noexcept;
std::optional<TlsVerify> parse_verify(std::string_view name) noexcept;
// The protocol number (as TLS writes it: 0x0303 for 1.2) of a TLS version accepted as a
// minimum: "1.2" or "1.3", or "TLSv1.2" or "TLSv1.3". Nothing for another.
std::optional<int> tls_version(std::string_view text) noexcept;

// The TLS settings a URL gives as parameters (?tls_ca_file=...), each over the matching
// field of Options::tls.
struct TlsParams {
  std::optional<std::string> ca_file, ca_dir, cert_file, key_file, server_name, min_version;
  std::optional<TlsVerify> verify;

  // Takes one URL parameter: false when `name` is not a TLS parameter; `bad` (which
  // throws) for a bad value.
  bool take(std::string_view name, std::string value,
            const std::function<void(const std::string&)>& bad);
  // `base` with the URL's parameters over it.
  TlsOptions over(TlsOptions base) const;
};

// "host:port", with an IPv6 host in brackets, as addresses are written in URLs and in
// Redis' own replies.
std::string host_port(const std::string& host, int port);

struct RedisEndpoint {
  std::string host;  // TCP host name or address (IPv6 without brackets)
  int port = 6379;
  std::string unix_path;  // set for a Unix socket instead of host/port
  std::string user;       // ACL user; empty: the default user
  std::string password;   // with no user either: no AUTH
  int db = 0;
  bool secure = false;  // TLS (rediss): connections go through `tls`
  std::shared_ptr<TlsContext> tls;  // set (by RedisAddress::use_tls) before connecting

  // Whether logging in starts with AUTH: a password or an ACL user (whose password may
  // be empty, for a nopass user) is given.
  bool authenticates() const noexcept { return !user.empty() || !password.empty(); }

  // "redis://[user[:password]@]host[:port][/db][?db=N]" (host may be [IPv6]), the same
  // with rediss:// (TLS, which also takes TLS parameters: ?tls_ca_file=...), or
  // "unix://[user[:password]@]/path/to/socket[?db=N]". User, password and parameter
  // values may be percent-encoded. Throws std::invalid_argument naming what is wrong;
  // `tls` gets a rediss URL's TLS parameters.
  static RedisEndpoint parse(std::string_view url, TlsParams* tls = nullptr);

  // The URL without the password, for logs and errors.
  std::string describe() const;

  // What logging in sends after connecting, in order: AUTH [user] password when it
  // authenticates(), SELECT db when db is not 0. Empty when neither is needed.
  std::vector<std::vector<std::string>> login_commands() const;
};

// What to add to the message of a login that failed: on a plain TCP endpoint, a server
// that closed the connection or answered outside RESP may be a TLS port.
std::string login_failure_hint(const RedisEndpoint& endpoint, const Status& failure);

// What Options::redis names: one server, a Redis Cluster (its seed nodes), or a primary
// that Redis Sentinel knows by name (the sentinels).
struct RedisAddress {
  enum class Kind { kSingle, kCluster, kSentinel };
  Kind kind = Kind::kSingle;
  // kSingle: the server; kCluster: the seed nodes; kSentinel: the sentinels, with the
  // sentinels' own credentials (?sentinel_user=, ?sentinel_password=).
  std::vector<RedisEndpoint> servers;
  // The data nodes' credentials (and database, outside a cluster); for kSingle, the
  // server itself.
  RedisEndpoint login;
  std::string master_name;  // kSentinel
  bool secure = false;      // TLS to every server (a rediss scheme)
  TlsParams tls_params;     // the URL's TLS parameters
  bool kind_single() const noexcept { return kind == Kind::kSingle; }

  // Also accepts, besides RedisEndpoint's forms:
  //   redis-cluster://[user[:password]@]host[:port][,host[:port]...]
  //   redis-sentinel://[user[:password]@]host[:port][,host[:port]...]/master-name
  //       [?sentinel_password=...&sentinel_user=...&db=N]
  // and rediss-cluster:// and rediss-sentinel:// with TLS (and its parameters), ports
  // defaulting to 6379 and 26379. Throws std::invalid_argument naming what is wrong.
  static RedisAddress parse(std::string_view url);
  // Every server's connections, and the nodes' made from `login`, through `context`.
  void use_tls(const std::shared_ptr<TlsContext>& context);
  // A data node at host:port, with `login`'s credentials.
  RedisEndpoint node(std::string host, int port) const;
  // The URL without passwords, for logs and errors.
  std::string describe() const;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
