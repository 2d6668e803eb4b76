#include "redis/loop_thread.h"

#include <string>
#include <system_error>

namespace ratewin {
inline namespace v1 {
namespace detail {

namespace {
// libuv's codes are negated errno values.
[[noreturn]] void throw_uv_error(int rc, const char* what) {
  throw std::system_error(-rc, std::generic_category(), std::string("ratewin: ") + what);
}
}  // namespace

LoopThread::LoopThread() {
  if (const int rc = uv_loop_init(&loop_); rc != 0) throw_uv_error(rc, "uv_loop_init");
  if (const int rc = uv_async_init(&loop_, &wake_, &LoopThread::on_wake); rc != 0) {
    uv_loop_close(&loop_);
    throw_uv_error(rc, "uv_async_init");
  }
  wake_.data = this;
  try {
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  } catch (...) {
    uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    uv_loop_close(&loop_);
    throw;
  }
}

LoopThread::~LoopThread() {
  stop([] {});
}

bool LoopThread::post(std::function<void()> task) {
  std::lock_guard lock(mutex_);
  if (stopping_) return false;
  tasks_.push_back(std::move(task));
  // Under the lock: once stop() has queued its last task, the wake handle may be closed
  // at any moment, so no post that got in before it may touch the handle after.
  uv_async_send(&wake_);
  return true;
}

void LoopThread::on_wake(uv_async_t* handle) {
  auto* self = static_cast<LoopThread*>(handle->data);
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard lock(self->mutex_);
    tasks.swap(self->tasks_);
  }
  for (auto& task : tasks) task();
}

int LoopThread::stop(const std::function<void()>& close_handles) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return close_result_;
    // The last task: after it the wake handle is closing and nothing else may be posted.
    tasks_.push_back([this, &close_handles] {
      close_handles();
      uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
    });
    stopping_ = true;
  }
  uv_async_send(&wake_);
  thread_.join();
  close_result_ = uv_loop_close(&loop_);
  return close_result_;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
