// make_store() of ratewin_cxx: the Redis store when Options::redis is set.
#include "engine/store.h"
#include "redis/redis_store.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

std::unique_ptr<Store> make_store(const Options& options, std::shared_ptr<const Clock> clock,
                                  SyncTarget& target) {
  if (options.redis.empty()) return nullptr;
  return std::make_unique<RedisStore>(options, std::move(clock), target);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
