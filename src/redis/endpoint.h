// Where a Redis server is and how to log in to it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ratewin::inline v1::detail {

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

}  // namespace ratewin::inline v1::detail
