// The seam between the engine and the shared store that makes counts global.
#pragma once

#include <cstdint>
#include <optional>

#include "record.h"

namespace ratewin::inline v1::detail {

// A store shared by every node enforcing the same limits (Redis in distributed mode).
// Local mode has no store: the engine then decides from its own counts alone.
//
// Implementations are called concurrently from application threads, never with an
// engine lock held, and must return within their own deadline.
class Store {
 public:
  virtual ~Store() = default;

  // Adds `cost` to the shared count of `epoch` of the limiter `key` and returns the
  // shared count of that epoch after the addition (every node's requests included),
  // or std::nullopt when the store could not be reached in time.
  virtual std::optional<std::uint64_t> add(const LimiterKey& key, std::int64_t epoch,
                                           std::uint64_t cost) = 0;
};

}  // namespace ratewin::inline v1::detail
