#include "engine/store.h"

#include <functional>
#include <utility>

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

// The writer of a store without connections of its own: each batch is written
// synchronously, on the loop's thread (for stores whose writes do not wait on I/O).
class SyncWriter final : public AsyncWriter {
 public:
  explicit SyncWriter(Store& store) : store_(store) {}
  void add_all(std::span<const StoreWrite> writes, std::span<const std::span<std::uint64_t>> counts,
               std::span<bool> written, std::function<void()> done) override {
    store_.add_all(writes, counts, written);
    done();
  }
  void remove(const StoreWrite& give_back) override { store_.remove(give_back); }
  void close() override {}

 private:
  Store& store_;
};

}  // namespace

StoreWrite store_write(const LimiterKey& key, std::int64_t counted, std::int64_t now,
                       std::uint64_t cost, bool first, const Limit& limit) noexcept {
  if (key.bucket()) return {key, now, cost, false, limit.emission_ns(), limit.tolerance_ns()};
  if (key.log()) return {key, now, cost, false, 0, 0, counted, limit.max()};
  return {key, counted, cost, first};
}

std::unique_ptr<AsyncWriter> Store::async_writer(uv_loop_s* /*loop*/) {
  return std::make_unique<SyncWriter>(*this);
}

void Store::write_async(std::span<const StoreWrite> writes,
                        std::span<const std::span<std::uint64_t>> counts, std::span<bool> written,
                        std::function<void(AsyncWriter&)> done) {
  SyncWriter writer(*this);
  add_all(writes, counts, written);
  const std::function<void(AsyncWriter&)> finish = std::move(done);
  finish(writer);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
