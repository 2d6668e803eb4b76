// Blocking connections shared by the application threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "redis_connection.h"

namespace ratewin::inline v1::detail {

// A connection per concurrent caller: a thread takes an idle connection (or opens one),
// makes its round trip with no lock held, and gives it back. So N threads writing at once
// use N connections and their round trips overlap. At most max_connections exist; a
// caller beyond that waits for one, up to the connect timeout. Thread-safe.
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
    Lease& operator=(Lease&&) noexcept = default;
    ~Lease() {
      if (connection_ != nullptr) pool_->give_back(std::move(connection_));
    }
    explicit operator bool() const noexcept { return connection_ != nullptr; }
    RedisConnection* operator->() const noexcept { return connection_.get(); }

   private:
    RedisPool* pool_ = nullptr;
    std::unique_ptr<RedisConnection> connection_;
  };

  // A connection, or an empty lease with `error` set.
  Lease acquire(std::string& error);
  // Closes the idle connections (after a failure: they may be as dead as the one that
  // failed).
  void drop_idle();
  std::size_t open_connections() const;

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

}  // namespace ratewin::inline v1::detail
