#include "http/loop_tasks.h"

#include <uv.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace ratewin::server {

LoopTasks::LoopTasks() : async_(std::make_unique<uv_async_t>()) {}

LoopTasks::~LoopTasks() = default;

std::shared_ptr<LoopTasks> LoopTasks::open(uv_loop_s* loop) {
  std::shared_ptr<LoopTasks> tasks(new LoopTasks());
  const int rc = uv_async_init(loop, tasks->async_.get(), [](uv_async_t* handle) {
    auto* self = static_cast<LoopTasks*>(handle->data);
    // Wake-ups coalesce: one call runs every task posted so far.
    for (std::function<void()>& task : self->take(false)) task();
  });
  if (rc != 0) throw std::runtime_error(std::string("uv_async_init: ") + uv_strerror(rc));
  tasks->async_->data = tasks.get();
  tasks->self_ = tasks;
  return tasks;
}

std::vector<std::function<void()>> LoopTasks::take(bool close) {
  std::vector<std::function<void()>> taken;
  std::lock_guard lock(mutex_);
  taken.swap(posted_);
  if (close) refusing_ = true;
  return taken;
}

bool LoopTasks::post(std::function<void()> task) {
  std::lock_guard lock(mutex_);
  if (refusing_) return false;
  posted_.push_back(std::move(task));
  // Under the lock: close() cannot have closed the handle meanwhile.
  uv_async_send(async_.get());
  return true;
}

void LoopTasks::close() {
  if (closing_) return;
  closing_ = true;
  std::vector<std::function<void()>> last = take(true);
  uv_close(reinterpret_cast<uv_handle_t*>(async_.get()), [](uv_handle_t* handle) {
    // The last use of the handle: whoever still holds this object may free it now.
    auto* self = static_cast<LoopTasks*>(handle->data);
    const std::shared_ptr<LoopTasks> release = std::move(self->self_);
  });
  for (std::function<void()>& task : last) task();
}

}  // namespace ratewin::server
