// make_store() for builds without a shared store (ratewin_local): local mode only.
#include <stdexcept>

#include "engine/store.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

std::unique_ptr<Store> make_store(const Options& options, std::shared_ptr<const Clock>,
                                  SyncTarget&) {
  if (!options.redis.empty()) {
    throw std::invalid_argument("ratewin::Options: redis is set, but this build has no Redis store");
  }
  return nullptr;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
