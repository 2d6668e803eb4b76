#include "redis/endpoint.h"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

namespace ratewin::test {
namespace {

using detail::RedisEndpoint;

std::string error_of(const char* url) {
  try {
    RedisEndpoint::parse(url);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Redis URLs") {
  const RedisEndpoint plain = RedisEndpoint::parse("redis://127.0.0.1");
  CHECK(plain.host == "127.0.0.1");
  CHECK(plain.port == 6379);
  CHECK(plain.db == 0);
  CHECK(plain.password.empty());
  CHECK(plain.describe() == "redis://127.0.0.1:6379");

  const RedisEndpoint full = RedisEndpoint::parse("redis://alice:s%40cret%3A1@cache.internal:6380/4");
  CHECK(full.user == "alice");
  CHECK(full.password == "s@cret:1");
  CHECK(full.host == "cache.internal");
  CHECK(full.port == 6380);
  CHECK(full.db == 4);
  CHECK(full.describe() == "redis://alice@cache.internal:6380/4");  // never the password

  const RedisEndpoint password_only = RedisEndpoint::parse("redis://:hunter2@h:1");
  CHECK(password_only.user.empty());
  CHECK(password_only.password == "hunter2");
  CHECK(RedisEndpoint::parse("redis://token@h").password == "token");
  CHECK(password_only.authenticates());
  CHECK_FALSE(plain.authenticates());
  // An ACL user with an empty password (a nopass user) still logs in as that user.
  const RedisEndpoint nopass = RedisEndpoint::parse("redis://reporter:@h");
  CHECK(nopass.user == "reporter");
  CHECK(nopass.password.empty());
  CHECK(nopass.authenticates());

  const RedisEndpoint v6 = RedisEndpoint::parse("redis://[::1]:7000/2");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 7000);
  CHECK(v6.db == 2);
  CHECK(v6.describe() == "redis://[::1]:7000/2");

  const RedisEndpoint unix_socket = RedisEndpoint::parse("unix://bob:pw@/run/redis/redis.sock?db=3");
  CHECK(unix_socket.unix_path == "/run/redis/redis.sock");
  CHECK(unix_socket.user == "bob");
  CHECK(unix_socket.password == "pw");
  CHECK(unix_socket.db == 3);
  CHECK(unix_socket.describe() == "unix://bob@/run/redis/redis.sock?db=3");
  CHECK(RedisEndpoint::parse("unix:///tmp/r.sock").unix_path == "/tmp/r.sock");
}

TEST_CASE("bad Redis URLs are clear errors") {
  CHECK(error_of("http://h") == "ratewin: bad Redis URL 'http://h': it must start with redis://, unix://, redis-cluster:// or redis-sentinel://");
  CHECK(error_of("redis://") == "ratewin: bad Redis URL 'redis://': no host");
  CHECK(error_of("redis://h:0") ==
        "ratewin: bad Redis URL 'redis://h:0': port '0' is not a number from 1 to 65535");
  CHECK(error_of("redis://h:port") ==
        "ratewin: bad Redis URL 'redis://h:port': port 'port' is not a number from 1 to 65535");
  CHECK(error_of("redis://h/x") ==
        "ratewin: bad Redis URL 'redis://h/x': db 'x' is not a number from 0 to 1048576");
  CHECK(error_of("redis://[::1") == "ratewin: bad Redis URL 'redis://[::1': unclosed [ in the host");
  CHECK(error_of("redis://a:%zz@h") ==
        "ratewin: bad Redis URL 'redis://a:***@h': bad percent-encoding in user or password");
  CHECK(error_of("redis://a:%-1@h") ==
        "ratewin: bad Redis URL 'redis://a:***@h': bad percent-encoding in user or password");
  CHECK(error_of("redis://a:%1@h") ==
        "ratewin: bad Redis URL 'redis://a:***@h': bad percent-encoding in user or password");
  // Messages never carry the password, nor a lone token.
  CHECK(error_of("redis://alice:s3cret@h:0") ==
        "ratewin: bad Redis URL 'redis://alice:***@h:0': port '0' is not a number from 1 to "
        "65535");
  CHECK(error_of("redis://t0ken@h:x").find("t0ken") == std::string::npos);
  CHECK(error_of("unix://relative.sock") ==
        "ratewin: bad Redis URL 'unix://relative.sock': a Unix socket path must be absolute");
  CHECK(error_of("unix:///s?timeout=1") ==
        "ratewin: bad Redis URL 'unix:///s?timeout=1': the only parameter is db=N");
}

}  // namespace ratewin::test
