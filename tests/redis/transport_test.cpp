// The transport under every Redis connection, and RESP written once and read back.
#include "redis/transport.h"

#include <doctest/doctest.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "redis/connection.h"
#include "redis/resp.h"
#include "eventually.h"
#include "resp_commands.h"

namespace ratewin::test {
namespace {

using namespace std::chrono_literals;

// A Unix socket that listens, in a folder of its own.
struct Listener {
  std::string dir;
  std::string path;
  int fd = -1;
  Listener() {
    char name[] = "/tmp/ratewin-transport-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    dir = name;
    path = dir + "/s.sock";
    fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof address.sun_path - 1);
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd, 4) == 0);
  }
  ~Listener() {
    ::close(fd);
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  detail::RedisEndpoint endpoint() const { return detail::RedisEndpoint::parse("unix://" + path); }
};

// Connects a transport to `endpoint`, waiting for the handshake.
std::unique_ptr<detail::Transport> connected(const detail::RedisEndpoint& endpoint) {
  detail::Status status;
  auto t = detail::Transport::open(endpoint, status);
  REQUIRE(t != nullptr);
  for (;;) {
    const detail::Io io = t->handshake(status);
    if (io.result == detail::Io::Result::done) return t;
    REQUIRE((io.result == detail::Io::Result::want_read || io.result == detail::Io::Result::want_write));
    REQUIRE(  // (kHang: a bound for a hang only)
        detail::Transport::wait(t->fd(), io.result, std::chrono::steady_clock::now() + kHang).ok());
  }
}

}  // namespace

TEST_CASE("writing to a peer that closed fails with an io status, without SIGPIPE") {
  // The default action of SIGPIPE would end this test process: the transport sends
  // without raising it, whatever the thread's signal mask.
  Listener listener;
  auto transport = connected(listener.endpoint());
  const int peer = ::accept(listener.fd, nullptr, nullptr);
  REQUIRE(peer >= 0);
  ::close(peer);
  detail::Status status;
  detail::Io io;
  const std::string data(64 * 1024, 'x');
  for (int i = 0; i < 100; ++i) {
    io = transport->write(data.data(), data.size(), status);
    if (io.result == detail::Io::Result::failed) break;
  }
  CHECK(io.result == detail::Io::Result::failed);
  CHECK(status.code() == detail::Status::Code::io);
  CHECK(status.opens_circuit());
  sigset_t pending;
  sigpending(&pending);
  CHECK_FALSE(sigismember(&pending, SIGPIPE));
  // Reading from it: the stream ended.
  char byte;
  CHECK(transport->read(&byte, 1, status).result != detail::Io::Result::done);
}

TEST_CASE("nothing listening: connecting fails with a connect status") {
  detail::Status status;
  std::unique_ptr<detail::Transport> t =
      detail::Transport::open(detail::RedisEndpoint::parse("unix:///nonexistent/r.sock"), status);
  CHECK(t == nullptr);
  CHECK(status.code() == detail::Status::Code::connect);
  CHECK(status.message().find("/nonexistent/r.sock") != std::string::npos);
  // A blocking connection says the same, and so does a TCP port nobody listens on.
  const auto none = detail::RedisConnection::open(
      detail::RedisEndpoint::parse("redis://127.0.0.1:1"), 200ms, 200ms, status);
  CHECK(none == nullptr);
  CHECK(status.code() == detail::Status::Code::connect);
  CHECK(status.opens_circuit());
}

TEST_CASE("RESP: commands written once, byte for byte what hiredis formats, and read back") {
  detail::RespWriter out;
  out.command({"SET", "key", std::string("a\0b", 3)});
  out.command(3);
  out.arg("INCRBY");
  out.arg("n");
  out.arg(std::int64_t{-42});
  out.command(1);
  out.arg_of_length(5);
  out.append("he");
  out.append("llo");
  out.end_arg();
  REQUIRE(out.commands() == 3);
  const char* argv[] = {"SET", "key", "a\0b"};
  const std::size_t lengths[] = {3, 3, 3};
  char* formatted = nullptr;
  const int n = redisFormatCommandArgv(&formatted, 3, argv, lengths);
  CHECK(out.command_bytes(0) == std::string_view(formatted, static_cast<std::size_t>(n)));
  redisFreeCommand(formatted);
  CHECK(commands_of(out.bytes()) ==
        std::vector<std::vector<std::string>>{{"SET", "key", std::string("a\0b", 3)},
                                              {"INCRBY", "n", "-42"},
                                              {"hello"}});
  // A command that does not get the arguments it declared is a mistake, said at once.
  out.command(2);
  out.arg("ONE");
  CHECK_THROWS_AS(out.command(1), std::logic_error);
  out.clear();
  CHECK(out.commands() == 0);
  CHECK(out.bytes().empty());

  // Replies parsed from bytes that come in pieces; error replies have their status.
  detail::RespReader in;
  const std::string replies = "+OK\r\n:7\r\n-MOVED 12 127.0.0.1:7001\r\n*2\r\n$3\r\nabc\r\n$-1\r\n";
  redisReply* r = nullptr;
  std::vector<std::string> seen;
  for (const char c : replies) {
    REQUIRE(in.feed(&c, 1).ok());
    REQUIRE(in.next(r).ok());
    if (r == nullptr) continue;
    seen.push_back(detail::reply_text(*r));
    if (r->type == REDIS_REPLY_ERROR) CHECK(detail::status_of(*r).code() == detail::Status::Code::redirect);
    in.release(r);
  }
  CHECK(seen == std::vector<std::string>{"OK", "7", "MOVED 12 127.0.0.1:7001", "(array of 2)"});
  REQUIRE(in.feed("?", 1).ok());
  CHECK(in.next(r).code() == detail::Status::Code::protocol);
}

TEST_CASE("error replies are classified by their code") {
  using Code = detail::Status::Code;
  const auto code = [](std::string_view text) { return detail::Status::of_error_reply(text).code(); };
  CHECK(code("MOVED 1 h:1") == Code::redirect);
  CHECK(code("ASK 1 h:1") == Code::redirect);
  CHECK(code("TRYAGAIN Multiple keys request during rehashing of slot") == Code::retry);
  CHECK(code("NOSCRIPT No matching script.") == Code::noscript);
  CHECK(code("READONLY You can't write against a read only replica.") == Code::unavailable);
  CHECK(code("LOADING Redis is loading the dataset in memory") == Code::unavailable);
  CHECK(code("BUSY Redis is busy running a script.") == Code::unavailable);
  CHECK(code("CLUSTERDOWN The cluster is down") == Code::unavailable);
  CHECK(code("MASTERDOWN Link with MASTER is down") == Code::unavailable);
  CHECK(code("BUSYKEY Target key name already exists.") == Code::refused);
  CHECK(code("NOAUTH Authentication required.") == Code::auth);
  CHECK(code("WRONGPASS invalid username-password pair or user is disabled.") == Code::auth);
  CHECK(code("ERR invalid password") == Code::auth);
  CHECK(code("ERR wrong number of arguments") == Code::refused);
  CHECK(detail::Status::of_error_reply("MOVEDX").code() == Code::refused);
  // Which failures open a node's circuit.
  CHECK(detail::Status(Code::unavailable, "").opens_circuit());
  CHECK(detail::Status(Code::auth, "").opens_circuit());
  CHECK_FALSE(detail::Status(Code::busy, "").opens_circuit());
  CHECK_FALSE(detail::Status(Code::redirect, "").opens_circuit());
  CHECK_FALSE(detail::Status(Code::refused, "").opens_circuit());
  CHECK_FALSE(detail::Status(Code::retry, "").opens_circuit());
  CHECK_FALSE(detail::Status().opens_circuit());
}

}  // namespace ratewin::test
