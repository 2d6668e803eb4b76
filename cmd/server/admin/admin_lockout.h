// The admin API's brute-force lockout, in a table of its own (the engine's limiters
// would be evicted by a flood of new client keys, and the lockout with them).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>

#include "common/address.h"

namespace ratewin::server {

// At most kMaxFailures wrong tokens from an address in any kWindow: an address that has
// used them up is refused, even with the right token, until the oldest of them is
// kWindow old. IPv6 addresses are counted by /64 (a host usually has a whole /64 to pick
// from); IPv4 ones by address.
//
// Bounded: at most `capacity` addresses with a wrong token in the last kWindow are held,
// and such an entry is never evicted to make room. When every entry is live, an address
// without one may still try (a right token always works from an address that is not
// locked out: before, wrong tokens from 16,384 addresses locked the admin out from a new
// one), but its attempt is not counted: the caller answers a wrong token from it 429, not
// 401, until the oldest entry expires. Entries older than kWindow are dropped as new
// attempts arrive.
//
// Time is a parameter (milliseconds of a steady clock). Thread-safe.
class AdminLockout {
 public:
  static constexpr std::size_t kMaxFailures = 10;
  static constexpr std::chrono::milliseconds kWindow{60'000};
  static constexpr std::size_t kDefaultCapacity = 16384;

  explicit AdminLockout(std::size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  struct Verdict {
    bool allowed = true;
    // Allowed, but not counted: no entry was free. retry_after: when one may be.
    bool table_full = false;
    std::chrono::milliseconds retry_after{0};  // when refused (or table_full)
  };
  // Before a token is checked. If allowed, the attempt is counted as a wrong token at
  // once (so that concurrent attempts cannot exceed the bound): call succeeded() when
  // the token turns out right.
  Verdict attempt(const IpAddress& address, std::int64_t now_ms);
  void succeeded(const IpAddress& address);

  // Addresses held now (with a wrong token in the last kWindow, or not dropped yet).
  std::size_t size() const;

 private:
  struct Entry {
    std::array<std::int64_t, kMaxFailures> failures{};  // a ring, oldest at `first`
    std::size_t first = 0;
    std::size_t count = 0;
    std::list<IpAddress>::iterator in_order;

    std::int64_t newest() const { return failures[(first + count - 1) % kMaxFailures]; }
    void expire(std::int64_t now_ms);
  };
  static IpAddress key_of(const IpAddress& address);
  // Drops expired entries from the front of order_.
  void drop_expired(std::int64_t now_ms);

  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<IpAddress, Entry, IpAddressHash> entries_;
  std::list<IpAddress> order_;  // by last attempt, the least recent first
};

}  // namespace ratewin::server
