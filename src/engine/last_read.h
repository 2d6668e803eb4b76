// What a thread remembers of its last decisions, so that the next one on the same limiter
// skips work: the rejection path's cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/registry.h"
#include "ratewin/decision.h"
#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

static_assert(std::is_trivially_copyable_v<Limit> && std::has_unique_object_representations_v<Limit>,
              "a limit is compared by its bytes");

// A copy of a limit's bytes, all zero at first (no valid limit): whether a call is made
// under the very same limit as an earlier one, in a few instructions.
struct LimitBytes {
  alignas(Limit) unsigned char bytes[sizeof(Limit)] = {};
  bool same(const Limit& limit) const noexcept {
    return std::memcmp(bytes, &limit, sizeof(Limit)) == 0;
  }
  void assign(const Limit& limit) noexcept { std::memcpy(bytes, &limit, sizeof(Limit)); }
};

// This thread's last lock-free read (EngineCore::read_without_lock). While the shard's
// version is the one seen then, nothing in the shard has changed: the record found is
// still the key's, and if that read rejected a request of cost 1, the same request under
// the same limit keeps being rejected, with the same absolute retry and reset times, until
// its retry time. The answer is kept only until the end of the record's epoch, so that a
// call in a later epoch still moves the window forward (exactly as
// SlidingWindow::try_acquire does).
//
// When the read was made for Engine::try_acquire by resource, `caller` is that resource:
// the key of the same resource under the same limit is this read's, so such a call is
// answered from here before its key is even made (EngineCore::reject_again).
struct LastRead {
  std::uint64_t engine = 0;  // EngineCore's id; 0: none
  std::uint64_t version = 0;
  Shard* shard = nullptr;
  LimiterKey key;
  RecordRef ref;
  LimitBytes limit;  // the limit it decided under
  std::int64_t rejects_until = std::numeric_limits<std::int64_t>::min();  // min(retry, epoch end)
  std::int64_t retry_at = 0;
  std::int64_t reset_at = 0;
  bool caller_known = false;
  std::uint64_t caller = 0;

  // The rejection it holds, for `as` (its limit) at `now` (before rejects_until).
  void rejection(std::int64_t now, const Limit& as, Decision& out) const noexcept {
    out.allowed = false;
    out.degraded = false;
    out.limit = as.burst();
    out.remaining = 0;
    out.reset_after = std::chrono::nanoseconds(reset_at - now);
    out.retry_after = std::chrono::nanoseconds(retry_at - now);
  }
};
inline constinit thread_local LastRead last_read;

// LimiterKey::of for callers that decide by resource: the limit's counter mix (its scope,
// mixed) is computed once for as long as this thread keeps asking under the same limit.
struct LastLimit {
  LimitBytes limit;
  std::uint64_t counter_mix = 0;

  LimiterKey key_of(std::uint64_t resource, const Limit& of) noexcept {
    if (!limit.same(of)) {
      counter_mix = LimiterKey::counter_mix(of);
      limit.assign(of);
    }
    return LimiterKey::counted(resource ^ counter_mix, of);
  }
};
inline constinit thread_local LastLimit last_limit;

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
