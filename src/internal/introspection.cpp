#include "ratewin_internal/introspection.h"

#include "core/record.h"
#include "redis/layout.h"

namespace ratewin {
inline namespace v1 {
namespace internal {

StoreWriteCommands store_write_commands(std::string_view prefix, std::uint64_t resource,
                                        const Limit& limit, std::int64_t epoch,
                                        std::uint64_t cost, bool first) {
  // Node 1: the change-set entry is the same size whatever the node.
  const detail::StoreLayout layout{std::string(prefix), 1};
  detail::RespWriter out;
  layout.append_write({detail::LimiterKey::of(resource, limit), epoch, cost, first && cost != 0},
                      out);
  return {std::string(out.bytes()), out.commands()};
}

std::size_t limiter_record_bytes(std::uint32_t subintervals, bool with_store) {
  return detail::Record::bytes_for(subintervals, with_store);
}

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
