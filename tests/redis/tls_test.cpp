// TLS to Redis (rediss://) against real redis-servers serving TLS, with certificates made
// for the run (tests/support/make_certs.sh): sharing a limit over TLS, mutual TLS, every
// kind of certificate a client must refuse (and the words it uses), plain and TLS on the
// wrong ports, session resumption, certificates reread after they change. The outage and
// deadline cases over TLS are in redis_test.cpp and partitioned_test.cpp (each runs over
// TCP and TLS); a TLS Cluster is in cluster_test.cpp, TLS Sentinel in sentinel_test.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ratewin/engine.h"
#include "redis/endpoint.h"
#include "redis/tls.h"
#include "redis/transport.h"
#include "certificates.h"
#include "deadlines.h"
#include "logs.h"
#include "eventually.h"
#include "redis_server.h"
#include "test_units.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


Options tls_options(const std::string& url, Logs* logs = nullptr) {
  Options o;
  o.redis = url;
  o.key_prefix = fresh_prefix("tls");
  // Long against a busy machine's delays (deadlines.h); a handshake under a sanitizer
  // beside a CPU hog may take more than one of them.
  o.connect_timeout = 2 * kDeadline;
  o.command_timeout = kDeadline;
  o.sync_settle = 5ms;
  o.tls.ca_file = certificates().path("ca.crt");
  o.logger = logs != nullptr ? logs->sink() : [](LogLevel, std::string_view) {};
  return o;
}

// What the Engine constructor with require_store says, or "" if it connected.
std::string refusal(Options options) {
  options.require_store = true;
  try {
    Engine engine(options);
    return "";
  } catch (const StoreError& e) {
    return e.what();
  }
}

// A Transport to `endpoint`, established (handshake done); null if not, or not within
// kHang (a bound for a hang only).
std::unique_ptr<detail::Transport> connected(const detail::RedisEndpoint& endpoint,
                                            detail::Status& status) {
  auto t = detail::Transport::open(endpoint, status);
  const auto deadline = Clock::now() + kHang;
  while (t != nullptr) {
    const detail::Io io = t->handshake(status);
    if (io.result == detail::Io::Result::done) return t;
    if (io.result != detail::Io::Result::want_read && io.result != detail::Io::Result::want_write)
      return nullptr;
    if (!detail::Transport::wait(t->fd(), io.result, deadline).ok()) return nullptr;
  }
  return nullptr;
}

// Sends PING on `t` and reads "+PONG\r\n" back (TLS session tickets come in on the way).
bool pings(detail::Transport& t) {
  detail::Status status;
  const std::string ping = "*1\r\n$4\r\nPING\r\n";
  const auto deadline = Clock::now() + kHang;  // (a bound for a hang only)
  std::size_t sent = 0;
  while (sent < ping.size()) {
    const detail::Io io = t.write(ping.data() + sent, ping.size() - sent, status);
    if (io.result == detail::Io::Result::done) {
      sent += io.bytes;
    } else if (io.result == detail::Io::Result::failed ||
               !detail::Transport::wait(t.fd(), io.result, deadline).ok()) {
      return false;
    }
  }
  std::string reply;
  char buffer[64];
  while (reply.size() < 7) {
    const detail::Io io = t.read(buffer, sizeof buffer, status);
    if (io.result == detail::Io::Result::done) {
      reply.append(buffer, io.bytes);
    } else if (io.result == detail::Io::Result::closed || io.result == detail::Io::Result::failed ||
               !detail::Transport::wait(t.fd(), io.result, deadline).ok()) {
      return false;
    }
  }
  return reply == "+PONG\r\n";
}

}  // namespace

TEST_CASE("TLS: engines share a limit exactly over rediss://, boundary reads included") {
  RedisServer redis({}, "", certificates().server());
  const Options options = tls_options(redis.tls_url());
  Engine a(options);
  Engine b(options);
  const Limit limit(10, 1s, 100ms);
  int allowed = 0;
  for (int i = 0; i < 30; ++i) {
    Engine& e = i % 2 == 0 ? a : b;
    const Decision d = e.try_acquire("shared", limit);
    CHECK_FALSE(d.degraded);
    allowed += d.allowed ? 1 : 0;
  }
  CHECK(allowed == 10);
  // The loop's connections (boundary reads, heartbeats) are TLS too: a node that only
  // reads learns of the other's counts.
  const Limit wide(1000, 10s, 1s);
  for (int i = 0; i < 40; ++i) REQUIRE(a.try_acquire("read-back", wide).allowed);
  CHECK(eventually([&] { return b.try_acquire("read-back", wide, 0).remaining <= 960; }));
  CHECK(a.stats().store_available);
}

TEST_CASE("TLS: mutual TLS with a client certificate; without one, a clear refusal") {
  RedisServer redis({}, "", certificates().server(/*auth_clients=*/true));
  Options options = tls_options(redis.tls_url());
  SUBCASE("with the client certificate") {
    options.tls.cert_file = certificates().path("client.crt");
    options.tls.key_file = certificates().path("client.key");
    CHECK(refusal(options).empty());
    Engine engine(options);
    CHECK_FALSE(engine.try_acquire("m", Limit(5, 1s, 100ms)).degraded);
  }
  SUBCASE("without") {
    const std::string why = refusal(options);
    CAPTURE(why);
    CHECK(why.find("certificate") != std::string::npos);
    // One hint, not two (the alert's reason and the certificate request each gave one).
    const std::size_t hint = why.find("client certificate");
    CHECK(hint != std::string::npos);
    CHECK(why.find("client certificate", hint + 1) == std::string::npos);
    CHECK(why.find("timed out") == std::string::npos);
    CHECK(why.find("unreachable") == std::string::npos);
  }
  SUBCASE("in the URL's parameters") {
    Options from_url = tls_options(redis.tls_url() + "?tls_cert_file=" +
                                   certificates().path("client.crt") + "&tls_key_file=" +
                                   certificates().path("client.key"));
    CHECK(refusal(from_url).empty());
  }
}

TEST_CASE("TLS: a certificate the client must refuse is refused, in words that say why") {
  struct Case {
    const char* what;
    const char* server_cert;  // make_certs.sh's name
    const char* server_name;  // Options::tls.server_name
    TlsVerify verify;
    const char* expected;  // in the message; empty: it connects
  };
  const Case cases[] = {
      {"signed by a CA the client does not trust", "other", "", TlsVerify::full,
       "certificate verify failed: "},
      {"expired", "expired", "", TlsVerify::full, "certificate has expired"},
      {"for another host name", "server", "redis.example.com", TlsVerify::full,
       "host name mismatch"},
      {"for another host name, checking the chain only", "server", "redis.example.com",
       TlsVerify::ca, ""},
      {"untrusted, with verification off", "other", "", TlsVerify::none, ""},
      {"for localhost, asked for as localhost", "server", "localhost", TlsVerify::full, ""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    RedisServer redis({}, "", certificates().server(false, c.server_cert));
    Logs logs;
    Options options = tls_options(redis.tls_url(), &logs);
    options.tls.server_name = c.server_name;
    options.tls.verify = c.verify;
    const auto start = Clock::now();
    const std::string why = refusal(options);
    CAPTURE(why);
    // Refused in the handshake, or connected, within one connect timeout.
    CHECK(Clock::now() - start < options.connect_timeout + kSlack);
    if (std::string(c.expected).empty()) {
      CHECK(why.empty());
    } else {
      CHECK(why.find(c.expected) != std::string::npos);
      CHECK(why.find("TLS handshake with rediss://127.0.0.1:") != std::string::npos);
    }
    if (c.verify == TlsVerify::none) {
      CHECK(logs.count("verify=none") == 1);  // once, however many connections
    }
  }
  // Without require_store the engine starts degraded, and says why in its stats.
  // (Its deadlines only bound a hang: the case is about the reason. With tls_options'
  // 2 s, a TSan build beside tests/under_load.sh's hog timed the handshake out, and the
  // reason was the timeout.)
  RedisServer untrusted({}, "", certificates().server(false, "other"));
  Options patient = tls_options(untrusted.tls_url());
  patient.connect_timeout = kHang;
  patient.command_timeout = kHang;
  Engine engine(patient);
  const Decision d = engine.try_acquire("x", Limit(5, 1s, 100ms));
  CHECK(d.allowed);
  CHECK(d.degraded);
  CHECK(engine.stats().last_error.find("certificate verify failed") != std::string::npos);
}

TEST_CASE("TLS: plain on a TLS port, TLS on a plain port: fast, clear errors") {
  RedisServer redis({}, "", certificates().server());
  SUBCASE("redis:// to the TLS port") {
    Options options = tls_options("redis://127.0.0.1:" + std::to_string(redis.tls_port()));
    options.tls = {};
    const auto start = Clock::now();
    const std::string why = refusal(options);
    CAPTURE(why);
    CHECK(Clock::now() - start < options.connect_timeout + kSlack);
    CHECK(why.find("rediss://") != std::string::npos);  // the hint
  }
  SUBCASE("rediss:// to the plain port") {
    const Options options = tls_options("rediss://127.0.0.1:" + std::to_string(redis.port()));
    const auto start = Clock::now();
    const std::string why = refusal(options);
    CAPTURE(why);
    CHECK(Clock::now() - start < options.connect_timeout + kSlack);
    CHECK(why.find("TLS handshake with") != std::string::npos);
    CHECK(why.find("plain port") != std::string::npos);
    CHECK(why.find("redis://") != std::string::npos);
  }
}

TEST_CASE("TLS settings are checked when the engine is made") {
  Options options = tls_options("rediss://127.0.0.1:1");
  SUBCASE("a CA file that does not exist") {
    options.tls.ca_file = "/nonexistent/ca.crt";
    CHECK_THROWS_WITH_AS(Engine{options},
                         doctest::Contains("'/nonexistent/ca.crt': No such file or directory"),
                         std::invalid_argument);
  }
  SUBCASE("a key that does not match the certificate") {
    options.tls.cert_file = certificates().path("client.crt");
    options.tls.key_file = certificates().path("server.key");
    CHECK_THROWS_WITH_AS(Engine{options}, doctest::Contains("does not match"),
                         std::invalid_argument);
  }
  SUBCASE("a minimum version it does not know") {
    options.tls.min_version = "1.1";
    CHECK_THROWS_WITH_AS(Engine{options}, doctest::Contains("min_version"), std::invalid_argument);
  }
  SUBCASE("TLS settings for a plain address") {
    options.redis = "redis://127.0.0.1:1";
    CHECK_THROWS_WITH_AS(Engine{options}, doctest::Contains("rediss"), std::invalid_argument);
  }
  SUBCASE("a bad parameter value in the URL") {
    options.redis = "rediss://127.0.0.1:1?tls_verify=maybe";
    CHECK_THROWS_WITH_AS(Engine{options}, doctest::Contains("tls_verify"), std::invalid_argument);
  }
  SUBCASE("TLS settings without a Redis address (local mode)") {
    options.redis.clear();
    CHECK_THROWS_WITH_AS(Engine{options}, doctest::Contains("no Redis address"),
                         std::invalid_argument);
  }
  SUBCASE("a TLS parameter on a plain URL") {
    options.tls = {};
    options.redis = "redis://127.0.0.1:1?tls_ca_file=/x";
    CHECK_THROWS_WITH_AS(Engine{options}, doctest::Contains("needs TLS"), std::invalid_argument);
  }
}

TEST_CASE("TLS: a reconnection resumes the session; changed certificate files are read again") {
  RedisServer redis({}, "", certificates().server());
  // A CA file that starts out wrong (another CA), then is replaced by the right one.
  const std::filesystem::path ca = std::filesystem::temp_directory_path() /
                                   ("ratewin-tls-ca-" + std::to_string(::getpid()) + ".crt");
  std::filesystem::copy_file(certificates().path("other-ca.crt"), ca,
                             std::filesystem::copy_options::overwrite_existing);
  TlsOptions settings;
  settings.ca_file = ca.string();
  detail::RedisAddress address =
      detail::secured(detail::RedisAddress::parse(redis.tls_url()), settings, nullptr);
  detail::Status status;
  CHECK(connected(address.login, status) == nullptr);
  CHECK(status.code() == detail::Status::Code::tls);
  CHECK(status.message().find("certificate verify failed") != std::string::npos);

  // Rotated: the next connection reads the file again, no restart.
  std::filesystem::copy_file(certificates().path("ca.crt"), ca,
                             std::filesystem::copy_options::overwrite_existing);
  auto first = connected(address.login, status);
  REQUIRE(first != nullptr);
  REQUIRE(first->tls() != nullptr);
  CHECK_FALSE(first->tls()->resumed());
  CHECK(pings(*first));  // (the session ticket arrives with the first reply)
  first.reset();
  auto second = connected(address.login, status);
  REQUIRE(second != nullptr);
  CHECK(second->tls()->resumed());
  CHECK(pings(*second));
  std::filesystem::remove(ca);
}

}  // namespace ratewin::test
