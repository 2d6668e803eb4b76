// The public Engine and LimiterHandle, over EngineCore.
#include "ratewin/engine.h"

#include <stdexcept>
#include <utility>

#include "engine/engine_core.h"

namespace ratewin {
inline namespace v1 {

Engine::Engine() : Engine(Options{}) {}

Engine::Engine(Options options)
    : core_(std::make_shared<detail::EngineCore>(std::move(options), nullptr)) {}

Engine::~Engine() = default;

Decision Engine::try_acquire(std::uint64_t resource, const Limit& limit, std::uint64_t cost) {
  return core_->try_acquire(resource, limit, cost);
}

bool Engine::flush() { return core_->flush(); }

std::size_t Engine::try_acquire_all(std::span<const Acquisition> items, std::span<Decision> out) {
  return core_->try_acquire_all(items, out);
}

std::size_t Engine::try_acquire_all_async(std::span<const Acquisition> items,
                                          std::span<Decision> out, AsyncDone done) {
  return core_->try_acquire_all_async(items, out, std::move(done));
}

bool Engine::reset(std::uint64_t resource, const Limit& limit) {
  return core_->reset(resource, limit);
}

std::uint64_t Engine::refund(std::uint64_t resource, const Limit& limit, std::uint64_t cost) {
  return core_->refund(resource, limit, cost);
}

LimiterHandle Engine::limiter(std::uint64_t resource, const Limit& limit) {
  auto [shard, ref] = core_->pin(resource, limit);
  return LimiterHandle(core_, shard, ref.record, ref.id, resource, limit);
}

LimiterHandle Engine::limiter(std::string_view resource, const Limit& limit) {
  return limiter(hash(resource), limit);
}

Stats Engine::stats() const { return core_->stats(); }

std::string Engine::store_key(std::uint64_t resource, const Limit& limit) const {
  return core_->store_key(resource, limit);
}

const Options& Engine::options() const noexcept { return core_->options(); }

std::size_t Engine::capacity(const Limit& limit) const noexcept { return core_->capacity(limit); }
std::size_t Engine::limiter_bytes(const Limit& limit) const noexcept {
  return core_->limiter_bytes(limit);
}

LimiterHandle::LimiterHandle(std::shared_ptr<detail::EngineCore> core, detail::Shard* shard,
                             detail::Record* record, std::uint32_t record_id,
                             std::uint64_t resource, const Limit& limit)
    : core_(std::move(core)),
      shard_(shard),
      record_(record),
      record_id_(record_id),
      resource_(resource),
      limit_(limit) {}

LimiterHandle::LimiterHandle(LimiterHandle&& other) noexcept
    : core_(std::move(other.core_)),
      shard_(std::exchange(other.shard_, nullptr)),
      record_(std::exchange(other.record_, nullptr)),
      record_id_(other.record_id_),
      resource_(other.resource_),
      limit_(other.limit_) {}

LimiterHandle& LimiterHandle::operator=(LimiterHandle&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    shard_ = std::exchange(other.shard_, nullptr);
    record_ = std::exchange(other.record_, nullptr);
    record_id_ = other.record_id_;
    resource_ = other.resource_;
    limit_ = other.limit_;
  }
  return *this;
}

LimiterHandle::~LimiterHandle() { release(); }

void LimiterHandle::release() noexcept {
  if (record_ != nullptr) detail::EngineCore::unpin(*shard_, {record_id_, record_});
  core_.reset();
  shard_ = nullptr;
  record_ = nullptr;
}

Decision LimiterHandle::try_acquire(std::uint64_t cost) {
  if (record_ == nullptr) throw std::logic_error("ratewin: LimiterHandle was moved from");
  return core_->try_acquire(*shard_, {record_id_, record_}, limit_, cost);
}

}  // namespace v1
}  // namespace ratewin
