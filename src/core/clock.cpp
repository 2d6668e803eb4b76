#include "ratewin/clock.h"

namespace ratewin {
inline namespace v1 {

std::shared_ptr<const Clock> system_clock() {
  static const auto clock = std::make_shared<const SystemClock>();
  return clock;
}

}  // namespace v1
}  // namespace ratewin
