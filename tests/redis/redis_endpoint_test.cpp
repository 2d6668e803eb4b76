#include "redis/endpoint.h"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

namespace ratewin::test {
namespace {

using detail::RedisEndpoint;

// What parsing `url` (any form) throws, or "".
std::string error_of(const char* url) {
  try {
    detail::RedisAddress::parse(url);
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
  CHECK(error_of("http://h") ==
        "ratewin: bad Redis URL 'http://h': it must start with redis://, rediss://, unix://, "
        "redis-cluster://, rediss-cluster://, redis-sentinel:// or rediss-sentinel://");
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
        "ratewin: bad Redis URL 'unix:///s?timeout=1': unknown parameter 'timeout' (known: db)");
}

}  // namespace ratewin::test

namespace ratewin::test {

TEST_CASE("TLS addresses: rediss schemes, their parameters, and what they refuse") {
  using detail::RedisAddress;
  const RedisAddress single = RedisAddress::parse(
      "rediss://default:pw@cache.example.com:6380/2?tls_ca_file=%2Fetc%2Fca.pem&tls_verify=ca"
      "&tls_server_name=redis.example.com&tls_min_version=1.3");
  CHECK(single.secure);
  CHECK(single.login.secure);
  CHECK(single.login.host == "cache.example.com");
  CHECK(single.login.port == 6380);
  CHECK(single.login.db == 2);
  CHECK(single.login.password == "pw");
  CHECK(single.describe() == "rediss://default@cache.example.com:6380/2");
  const TlsOptions given = single.tls_params.over(TlsOptions{});
  CHECK(given.ca_file == "/etc/ca.pem");
  CHECK(given.verify == TlsVerify::ca);
  CHECK(given.server_name == "redis.example.com");
  CHECK(given.min_version == "1.3");
  // A parameter wins over the options; what it does not give, the options keep.
  TlsOptions base;
  base.cert_file = "/etc/client.pem";
  base.verify = TlsVerify::full;
  const TlsOptions merged = single.tls_params.over(base);
  CHECK(merged.cert_file == "/etc/client.pem");
  CHECK(merged.verify == TlsVerify::ca);

  const RedisAddress cluster =
      RedisAddress::parse("rediss-cluster://:pw@a:7000,b:7001?tls_cert_file=/c.pem");
  CHECK(cluster.kind == RedisAddress::Kind::kCluster);
  CHECK(cluster.secure);
  CHECK(cluster.servers.size() == 2);
  CHECK(cluster.servers[1].secure);
  CHECK(cluster.node("10.0.0.1", 7002).secure);
  CHECK(cluster.tls_params.over({}).cert_file == "/c.pem");
  CHECK(cluster.describe() == "rediss-cluster://a:7000,b:7001");

  const RedisAddress sentinel = RedisAddress::parse(
      "rediss-sentinel://s1,s2:5000/mymaster?sentinel_password=x&tls_ca_file=/ca.pem&db=1");
  CHECK(sentinel.kind == RedisAddress::Kind::kSentinel);
  CHECK(sentinel.secure);
  CHECK(sentinel.servers[0].secure);
  CHECK(sentinel.servers[0].port == 26379);
  CHECK(sentinel.servers[0].password == "x");
  CHECK(sentinel.login.db == 1);
  CHECK(sentinel.node("10.0.0.1", 6379).secure);
  CHECK(sentinel.describe() == "rediss-sentinel://s1:26379,s2:5000/mymaster");

  CHECK(error_of("redis://h?tls_ca_file=/x").find("'tls_ca_file' needs TLS: use a rediss scheme") !=
        std::string::npos);
  CHECK(error_of("rediss://h?tls_verify=maybe").find("tls_verify 'maybe' is not full, ca or none") !=
        std::string::npos);
  CHECK(error_of("rediss://h?tls_min_version=1.1").find("is not 1.2 or 1.3") != std::string::npos);
  CHECK(error_of("rediss://h?timeout=1").find("known: db, tls_ca_file") != std::string::npos);
  CHECK(error_of("redis-cluster://h?x=1").find("it takes none") != std::string::npos);
  CHECK(error_of("unix:///s?tls_ca_file=/x").find("not spoken over a Unix socket") !=
        std::string::npos);
  // An '@' in a parameter's value is not the end of credentials.
  const RedisAddress at_in_path = RedisAddress::parse("rediss://:pw@h:1?tls_ca_file=/a@b/ca.crt");
  CHECK(at_in_path.login.host == "h");
  CHECK(at_in_path.login.password == "pw");
  CHECK(at_in_path.tls_params.over({}).ca_file == "/a@b/ca.crt");
  CHECK(error_of("rediss://h:x?tls_ca_file=/a@b").find("/a@b") != std::string::npos);
  // A percent-encoding error never quotes the text (it may be a password).
  CHECK(error_of("rediss://h?tls_server_name=%zz").find("in parameter 'tls_server_name'") !=
        std::string::npos);
}

}  // namespace ratewin::test
