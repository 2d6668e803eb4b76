// Where a Redis server is and how to log in to it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ratewin::inline v1::detail {

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

  // Whether logging in starts with AUTH: a password or an ACL user (whose password may
  // be empty, for a nopass user) is given.
  bool authenticates() const noexcept { return !user.empty() || !password.empty(); }

  // "redis://[user[:password]@]host[:port][/db]" (host may be [IPv6]) or
  // "unix://[user[:password]@]/path/to/socket[?db=N]". User and password may be
  // percent-encoded. Throws std::invalid_argument naming what is wrong.
  static RedisEndpoint parse(std::string_view url);

  // The URL without the password, for logs and errors.
  std::string describe() const;

  // What logging in sends after connecting, in order: AUTH [user] password when it
  // authenticates(), SELECT db when db is not 0. Empty when neither is needed.
  std::vector<std::vector<std::string>> login_commands() const;
};

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
  bool kind_single() const noexcept { return kind == Kind::kSingle; }

  // Also accepts, besides RedisEndpoint's forms:
  //   redis-cluster://[user[:password]@]host[:port][,host[:port]...]
  //   redis-sentinel://[user[:password]@]host[:port][,host[:port]...]/master-name
  //       [?sentinel_password=...&sentinel_user=...&db=N]
  // (ports default to 6379 and 26379). Throws std::invalid_argument naming what is wrong.
  static RedisAddress parse(std::string_view url);
  // A data node at host:port, with `login`'s credentials.
  RedisEndpoint node(std::string host, int port) const;
  // The URL without passwords, for logs and errors.
  std::string describe() const;
};

}  // namespace ratewin::inline v1::detail
