// job_queue.h: a thread of its own that runs jobs one after the other, in the order they
// came, for callers that must not wait on them (an event loop waiting on Redis, or on a
// large rules file's parse).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/outcome.h"

namespace ratewin::server {

class JobQueue {
 public:
  // A job, which says how it went.
  using Job = std::function<Status()>;
  // Called on the queue's thread with the job's outcome.
  using Done = std::function<void(const Status& outcome)>;

  // `capacity`: how many jobs may wait at most (the one running not counted).
  explicit JobQueue(std::size_t capacity);
  // Waits for the job running, if any; those still waiting are not run, and their `done`
  // gets a `closed` Status saying so.
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Queues `job`, whose outcome goes to `done`. False when `capacity` jobs wait already:
  // then neither is ever called. A job that throws has the exception's message as its
  // outcome (code `unavailable`). Thread-safe.
  bool submit(Job job, Done done);

 private:
  struct Submitted {
    Job job;
    Done done;
  };
  void run();

  const std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Submitted> waiting_;  // not taken by the thread yet
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is
};

}  // namespace ratewin::server
