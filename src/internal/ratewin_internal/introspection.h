// What ratewin's own benchmarks may know of the library's insides: the Redis commands and
// keys the store uses (so that a baseline sends exactly the same commands), and the size
// of a limiter in memory. Part of the internal target ratewin::internal: not installed,
// no stability promise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace internal {

// The commands one write of the Redis store sends, as one pipeline, in RESP (the very bytes
// the store sends), and how many there are: an engine with key prefix `prefix` admitting
// `cost` of `resource` under `limit` in `epoch` (a subinterval number: Redis' time /
// resolution). `first`: its first write to that limiter in the epoch (with the
// once-per-subinterval bookkeeping and the change set). cost 0: a read.
struct StoreWriteCommands {
  std::string resp;
  std::size_t count = 0;
};
StoreWriteCommands store_write_commands(std::string_view prefix, std::uint64_t resource,
                                        const Limit& limit, std::int64_t epoch,
                                        std::uint64_t cost, bool first);
// Bytes of a limiter's record (header and buckets) with `subintervals` subintervals, in an
// engine with a shared store or without.
std::size_t limiter_record_bytes(std::uint32_t subintervals, bool with_store);

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
