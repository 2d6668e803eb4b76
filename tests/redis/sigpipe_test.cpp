#include "redis/sigpipe.h"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <future>

#include "redis/loop_thread.h"

namespace ratewin::test {
namespace {

// A connected socket pair whose other end is closed: writing to it raises SIGPIPE.
struct ClosedPeer {
  int fd = -1;
  ClosedPeer() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    ::close(fds[1]);
    fd = fds[0];
  }
  ~ClosedPeer() { ::close(fd); }
  ClosedPeer(const ClosedPeer&) = delete;
  ClosedPeer& operator=(const ClosedPeer&) = delete;
  // write(2)'s result and errno.
  std::pair<ssize_t, int> write_byte() const {
    errno = 0;
    const ssize_t n = ::write(fd, "x", 1);
    return {n, errno};
  }
};

bool sigpipe_blocked() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

bool sigpipe_pending() {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

}  // namespace

TEST_CASE("writing to a closed connection under SigpipeBlock fails with EPIPE, quietly") {
  // Without the guard, the default action of SIGPIPE would end this test process.
  ClosedPeer peer;
  REQUIRE_FALSE(sigpipe_blocked());
  {
    const detail::SigpipeBlock guard;
    CHECK(sigpipe_blocked());
    const auto [n, error] = peer.write_byte();
    CHECK(n == -1);
    CHECK(error == EPIPE);
  }
  // The signal the write raised was taken, and the mask is as it was.
  CHECK_FALSE(sigpipe_pending());
  CHECK_FALSE(sigpipe_blocked());
}

TEST_CASE("the loop thread writes to closed connections without SIGPIPE") {
  ClosedPeer peer;
  detail::LoopThread loop;
  std::promise<std::pair<ssize_t, int>> result;
  loop.post([&] { result.set_value(peer.write_byte()); });
  const auto [n, error] = result.get_future().get();
  CHECK(n == -1);
  CHECK(error == EPIPE);
  CHECK(loop.stop([] {}) == 0);
}

}  // namespace ratewin::test
