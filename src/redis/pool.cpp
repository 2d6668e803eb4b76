#include "redis/pool.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

RedisPool::RedisPool(RedisEndpoint endpoint, std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds command_timeout, std::size_t max_connections)
    : endpoint_(std::move(endpoint)),
      connect_timeout_(connect_timeout),
      command_timeout_(command_timeout),
      max_connections_(max_connections == 0 ? 1 : max_connections) {}

RedisPool::Lease RedisPool::acquire(RedisConnection::Deadline deadline, Status& status) {
  {
    std::unique_lock lock(mutex_);
    for (;;) {
      const bool available = released_.wait_until(
          lock, deadline, [&] { return !idle_.empty() || open_ < max_connections_; });
      if (!available) {
        status = Status(Status::Code::busy, "all " + std::to_string(max_connections_) +
                                                " Redis connections stayed busy");
        return {};
      }
      if (idle_.empty()) break;
      std::unique_ptr<RedisConnection> c = std::move(idle_.back());
      idle_.pop_back();
      lock.unlock();
      if (c->alive()) return Lease(this, std::move(c));
      c.reset();  // the server closed it while it was idle: close ours, try again
      lock.lock();
      --open_;
    }
    ++open_;  // reserve the slot while connecting without the lock
  }
  std::unique_ptr<RedisConnection> c =
      RedisConnection::open(endpoint_, connect_timeout_, command_timeout_, status, deadline);
  if (c == nullptr) {
    std::lock_guard lock(mutex_);
    --open_;
    released_.notify_one();
    return {};
  }
  Lease lease(this, std::move(c));
  lease.fresh_ = true;
  return lease;
}

void RedisPool::give_back(std::unique_ptr<RedisConnection> connection) {
  std::unique_ptr<RedisConnection> closing;
  {
    std::lock_guard lock(mutex_);
    if (connection->broken()) {
      closing = std::move(connection);  // closed below, without the lock
      --open_;
    } else {
      idle_.push_back(std::move(connection));
    }
  }
  released_.notify_one();
}

void RedisPool::drop_idle() {
  std::vector<std::unique_ptr<RedisConnection>> closing;
  {
    std::lock_guard lock(mutex_);
    closing.swap(idle_);
    open_ -= closing.size();
  }
  released_.notify_all();
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
