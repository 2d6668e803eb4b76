// Work handed to a libuv loop from other threads: post() queues a function and wakes the
// loop (uv_async_send, the one libuv call another thread may make), and the loop runs
// what was posted, in the order it came. A thread that did slow work for the loop (a
// blocking call to Redis) posts the outcome back this way, to be used on the loop's
// thread (an HTTP Responder, say, which is not thread-safe).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

struct uv_loop_s;   // uv_loop_t
struct uv_async_s;  // uv_async_t

namespace ratewin::server {

class LoopTasks {
 public:
  // On the loop's thread. Holds a handle on the loop, which keeps it running until
  // close(). Throws std::runtime_error if libuv refuses the handle.
  static std::shared_ptr<LoopTasks> open(uv_loop_s* loop);
  ~LoopTasks();
  LoopTasks(const LoopTasks&) = delete;
  LoopTasks& operator=(const LoopTasks&) = delete;

  // From any thread: `task` runs on the loop's thread, after the tasks posted before it.
  // False once closed: the task is not run, and is destroyed before this returns, on the
  // calling thread (so what a task holds must be safe to destroy on either thread).
  bool post(std::function<void()> task);
  // On the loop's thread: runs the tasks posted so far, refuses later ones, and closes the
  // handle (the loop must run once more for it to close; this object lives until then,
  // and for as long as anyone else holds it). Idempotent.
  void close();
  // On the loop's thread: close() has been called.
  bool closed() const noexcept { return closing_; }

 private:
  LoopTasks();
  // Takes the tasks posted so far (and, with `close`, refuses any more).
  std::vector<std::function<void()>> take(bool close);

  std::unique_ptr<uv_async_s> async_;
  std::mutex mutex_;
  std::vector<std::function<void()>> posted_;  // under mutex_
  bool refusing_ = false;                      // under mutex_
  bool closing_ = false;                       // the loop's thread's own
  std::shared_ptr<LoopTasks> self_;            // from open() until the handle has closed
};

}  // namespace ratewin::server
