#include "ratewin/async.h"

#include <algorithm>
#include <list>
#include <optional>
#include <vector>

#include "engine/acquire_all.h"
#include "engine/engine_core.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// AsyncAcquirer's state: the calls whose writes are in flight, and the store's writer
// for this loop.
class LoopAcquirer {
 public:
  LoopAcquirer(std::shared_ptr<EngineCore> core, uv_loop_s* loop)
      : core_(std::move(core)),
        writer_(core_->store() != nullptr ? core_->store()->async_writer(loop) : nullptr) {}
  ~LoopAcquirer() { close(); }

  std::size_t try_acquire_all(std::span<const Acquisition> items, std::span<Decision> out,
                              AsyncAcquirer::Done& done) {
    if (writer_ == nullptr || closed_) return core_->try_acquire_all(items, out);
    if (out.size() < items.size()) throw std::invalid_argument("try_acquire_all: out is too short");
    if (spare_.empty()) spare_.emplace_front();
    calls_.splice(calls_.begin(), spare_, spare_.begin());
    Call& call = calls_.front();
    call.self = calls_.begin();
    call.items.assign(items.begin(), items.end());
    call.decisions.assign(items.size(), Decision{});
    call.refused.reset();
    call.all.emplace(*core_, call.items, call.decisions);
    AcquireAll& all = *call.all;
    if (const std::optional<std::size_t> decided = all.begin()) {
      return settle_now(call, *decided, out);
    }
    call.sending = true;
    writer_->add_all(all.writes(), all.counts(), all.written(), [this, &call] {
      const std::size_t refused = call.all->finish(writer_.get());
      if (call.sending) {  // completed before add_all returned
        call.refused = refused;
        return;
      }
      // The call's decisions are the callback's to read; it is reused once that returns.
      const AsyncAcquirer::Done then = std::move(call.done);
      call.all.reset();
      then(refused, call.decisions);
      spare_.splice(spare_.begin(), calls_, call.self);
    });
    call.sending = false;
    if (call.refused) return settle_now(call, *call.refused, out);
    call.done = std::move(done);
    return AsyncAcquirer::kPending;
  }

  std::size_t pending() const noexcept { return calls_.size(); }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (writer_ != nullptr) writer_->close();  // completes what is in flight
  }

 private:
  // One call whose writes are in flight; it does not move (its admissions refer to it).
  struct Call {
    std::vector<Acquisition> items;
    std::vector<Decision> decisions;
    std::optional<AcquireAll> all;
    AsyncAcquirer::Done done;
    std::list<Call>::iterator self;
    bool sending = false;
    std::optional<std::size_t> refused;
  };

  std::size_t settle_now(Call& call, std::size_t refused, std::span<Decision> out) {
    std::copy(call.decisions.begin(), call.decisions.end(), out.begin());
    call.all.reset();
    spare_.splice(spare_.begin(), calls_, call.self);
    return refused;
  }

  std::shared_ptr<EngineCore> core_;
  std::unique_ptr<AsyncWriter> writer_;
  std::list<Call> calls_;
  std::list<Call> spare_;  // finished calls, kept for their buffers
  bool closed_ = false;
};

}  // namespace detail

AsyncAcquirer::AsyncAcquirer(Engine& engine, uv_loop_s* loop)
    : impl_(std::make_unique<detail::LoopAcquirer>(engine.core_, loop)) {}

AsyncAcquirer::~AsyncAcquirer() = default;

std::size_t AsyncAcquirer::try_acquire_all(std::span<const Acquisition> items,
                                           std::span<Decision> out, Done done) {
  return impl_->try_acquire_all(items, out, done);
}

std::size_t AsyncAcquirer::pending() const noexcept { return impl_->pending(); }

void AsyncAcquirer::close() { impl_->close(); }

}  // namespace v1
}  // namespace ratewin
