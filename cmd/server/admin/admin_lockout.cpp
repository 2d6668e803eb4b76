#include "admin/admin_lockout.h"

namespace ratewin::server {

void AdminLockout::Entry::expire(std::int64_t now_ms) {
  while (count != 0 && failures[first] <= now_ms - kWindow.count()) {
    first = (first + 1) % kMaxFailures;
    --count;
  }
}

IpAddress AdminLockout::key_of(const IpAddress& address) {
  return address.is_v4() ? address : address.masked(64);
}

void AdminLockout::drop_expired(std::int64_t now_ms) {
  while (!order_.empty()) {
    const auto it = entries_.find(order_.front());
    it->second.expire(now_ms);
    if (it->second.count != 0) return;
    entries_.erase(it);
    order_.pop_front();
  }
}

AdminLockout::Verdict AdminLockout::attempt(const IpAddress& address, std::int64_t now_ms) {
  const IpAddress key = key_of(address);
  std::lock_guard lock(mutex_);
  drop_expired(now_ms);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= capacity_) {
      // Every entry is live (drop_expired stopped at a live one, and entries behind it
      // were tried later; an entry whose newest failure was refunded may be older, which
      // at worst refuses a little longer than needed).
      const Entry& oldest = entries_.find(order_.front())->second;
      return {true, true, std::chrono::milliseconds(oldest.newest() + kWindow.count() - now_ms)};
    }
    order_.push_back(key);
    it = entries_.emplace(key, Entry{}).first;
    it->second.in_order = std::prev(order_.end());
  } else {
    order_.splice(order_.end(), order_, it->second.in_order);
  }
  Entry& e = it->second;
  e.expire(now_ms);
  if (e.count == kMaxFailures) {
    return {false, false,
            std::chrono::milliseconds(e.failures[e.first] + kWindow.count() - now_ms)};
  }
  e.failures[(e.first + e.count) % kMaxFailures] = now_ms;
  ++e.count;
  return {};
}

void AdminLockout::succeeded(const IpAddress& address) {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(key_of(address));
  if (it == entries_.end() || it->second.count == 0) return;
  if (--it->second.count == 0) {
    order_.erase(it->second.in_order);
    entries_.erase(it);
  }
}

std::size_t AdminLockout::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace ratewin::server
