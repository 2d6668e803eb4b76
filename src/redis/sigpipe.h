// Writing to a socket the peer has closed raises SIGPIPE, whose default action ends the
// process. hiredis writes with write(2), so every thread that writes to Redis keeps
// SIGPIPE away from the application: the loop thread blocks it for good, and an
// application thread blocks it around each round trip and discards the one its write
// raised, if any (the write itself then fails with EPIPE, which is handled).
#pragma once

#include <signal.h>

#include <ctime>

namespace ratewin::inline v1::detail {

// Blocks SIGPIPE in the calling thread for its lifetime; on the way out, takes a
// SIGPIPE raised meanwhile (unless one was already pending before) and restores the
// thread's signal mask.
class SigpipeBlock {
 public:
  SigpipeBlock() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
  }
  ~SigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

  // For threads of our own: SIGPIPE stays blocked for the thread's whole life.
  static void block_for_this_thread() noexcept {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  }

 private:
  sigset_t pipe_{};
  sigset_t saved_{};
  bool was_pending_ = false;
};

}  // namespace ratewin::inline v1::detail
