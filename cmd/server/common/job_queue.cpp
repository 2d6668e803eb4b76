#include "common/job_queue.h"

#include <exception>
#include <utility>

namespace ratewin::server {

JobQueue::JobQueue(std::size_t capacity) : capacity_(capacity), thread_([this] { run(); }) {}

JobQueue::~JobQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool JobQueue::submit(Job job, Done done) {
  {
    std::lock_guard lock(mutex_);
    if (stop_ || waiting_.size() >= capacity_) return false;
    waiting_.push_back({std::move(job), std::move(done)});
  }
  cv_.notify_one();
  return true;
}

void JobQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !waiting_.empty(); });
    if (stop_) break;
    Submitted next = std::move(waiting_.front());
    waiting_.pop_front();
    lock.unlock();
    std::string error;
    try {
      error = next.job();
    } catch (const std::exception& e) {  // no exception may end this thread
      error = "not made: " + std::string(e.what());
    }
    next.done(std::move(error));
    lock.lock();
  }
  // Stopping: a job still waiting could take long (seconds on Redis, each).
  std::deque<Submitted> left;
  left.swap(waiting_);
  lock.unlock();
  for (Submitted& s : left) s.done("not made: the server is shutting down");
}

}  // namespace ratewin::server
