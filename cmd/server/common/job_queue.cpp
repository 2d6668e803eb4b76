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
    Status outcome;
    try {
      outcome = next.job();
    } catch (const std::exception& e) {  // no exception may end this thread
      outcome = Status(Status::Code::unavailable, "not made: " + std::string(e.what()));
    }
    next.done(outcome);
    lock.lock();
  }
  // Stopping: a job still waiting could take long (seconds on Redis, each).
  std::deque<Submitted> left;
  left.swap(waiting_);
  lock.unlock();
  const Status shutting_down(Status::Code::closed, "not made: the server is shutting down");
  for (Submitted& s : left) s.done(shutting_down);
}

}  // namespace ratewin::server
