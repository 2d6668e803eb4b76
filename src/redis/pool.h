// Blocking connections shared by the application threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "redis/connection.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// A connection per concurrent caller: a thread takes an idle connection (or opens one),
// makes its round trip with no lock held, and gives it back. So N threads writing at once
// use N connections and their round trips overlap. At most max_connections exist; a
// caller beyond that waits for one until its deadline. An idle connection the server has
// closed meanwhile (Redis' idle `timeout`) is dropped instead of lent. Thread-safe.
class RedisPool {
 public:
  RedisPool(RedisEndpoint endpoint, std::chrono::milliseconds connect_timeout,
            std::chrono::milliseconds command_timeout, std::size_t max_connections);

  class Lease {
   public:
    Lease() = default;
    Lease(RedisPool* pool, std::unique_ptr<RedisConnection> connection) noexcept
        : pool_(pool), connection_(std::move(connection)) {}
    Lease(Lease&&) noexcept = default;
    // Gives back the connection it held first.
    Lease& operator=(Lease&& other) noexcept {
      if (this != &other) {
        reset();
        pool_ = other.pool_;
        connection_ = std::move(other.connection_);
        fresh_ = other.fresh_;
      }
      return *this;
    }
    ~Lease() { reset(); }
    // Gives the connection back now.
    void reset() noexcept {
      if (connection_ != nullptr) pool_->give_back(std::move(connection_));
    }
    explicit operator bool() const noexcept { return connection_ != nullptr; }
    RedisConnection* operator->() const noexcept { return connection_.get(); }
    RedisConnection& operator*() const noexcept { return *connection_; }
    // The connection was opened for this lease (which took up to the connect timeout).
    bool fresh() const noexcept { return fresh_; }

   private:
    friend class RedisPool;
    RedisPool* pool_ = nullptr;
    std::unique_ptr<RedisConnection> connection_;
    bool fresh_ = false;
  };

  // A connection, or an empty lease with `status` set: busy when every connection stayed
  // lent until `deadline` (not a network failure), or why a new one could not be opened.
  // Opening one takes up to the connect timeout more.
  Lease acquire(RedisConnection::Deadline deadline, Status& status);
  // Closes the idle connections (after a failure: they may be as dead as the one that
  // failed).
  void drop_idle();

 private:
  void give_back(std::unique_ptr<RedisConnection> connection);

  const RedisEndpoint endpoint_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds command_timeout_;
  const std::size_t max_connections_;
  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  std::size_t open_ = 0;  // idle + lent
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
