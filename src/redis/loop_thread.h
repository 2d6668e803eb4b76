// A libuv loop running on a thread of its own.
#pragma once

#include <uv.h>

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ratewin {
inline namespace v1 {
namespace detail {

// Owns a uv_loop_t and the thread that runs it. Other threads hand it work with
// post(), the only thread-safe entry (it uses uv_async_send, which coalesces, so the
// loop drains the whole queue each time it wakes).
class LoopThread {
 public:
  LoopThread();
  ~LoopThread();  // stop()s if that was not done
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  uv_loop_t* loop() noexcept { return &loop_; }

  // Runs `task` on the loop thread, after the tasks posted before it. Thread-safe.
  // Returns false (and drops the task) once stop() has begun.
  bool post(std::function<void()> task);

  // Stops the loop: runs `close_handles` on the loop thread (the owner closes its own
  // handles there), closes the loop's own handle, lets the loop run until every handle
  // is closed, joins the thread and closes the loop. Returns uv_loop_close's result: 0
  // when nothing was left open. Idempotent (later calls return the first result).
  int stop(const std::function<void()>& close_handles);

 private:
  static void on_wake(uv_async_t* handle);

  uv_loop_t loop_{};
  uv_async_t wake_{};
  std::mutex mutex_;  // guards tasks_ and stopping_
  std::vector<std::function<void()>> tasks_;
  bool stopping_ = false;
  int close_result_ = 0;
  std::thread thread_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
