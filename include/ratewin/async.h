// ratewin/async.h: decisions for a libuv event loop, whose admissions never block it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "ratewin/engine.h"

struct uv_loop_s;  // uv_loop_t

namespace ratewin {
inline namespace v1 {

namespace detail {
class LoopAcquirer;
}

// Engine::try_acquire_all for code that runs on a libuv loop: in Redis mode an admitted
// request's shared write goes out on connections of this loop's own (one per Redis
// node), pipelined with the loop's other writes, and the decision completes on the loop
// when the reply arrives, instead of the loop waiting a round trip. Rejections decided
// from local counts, local mode, and decisions while the store is unreachable are
// answered at once, as by the Engine.
//
// Threads: made, used, closed and destroyed on the loop's thread only; callbacks run on
// it. Several AsyncAcquirers (one per loop) may share an Engine with any other callers.
class AsyncAcquirer {
 public:
  // `decisions` are the limits' decisions, as try_acquire_all fills them; valid during
  // the call. `refused`: the index of the limit that refused, or decisions.size().
  using Done = Engine::AsyncDone;

  // `loop` must outlive this object, and run until close() has been followed by a turn of
  // the loop (its connections' handles then close).
  AsyncAcquirer(Engine& engine, uv_loop_s* loop);
  ~AsyncAcquirer();  // calls close()
  AsyncAcquirer(const AsyncAcquirer&) = delete;
  AsyncAcquirer& operator=(const AsyncAcquirer&) = delete;

  // As Engine::try_acquire_all. When the decision needs no round trip, it fills `out`
  // (which must hold items.size() decisions) and returns what try_acquire_all would; `done`
  // is not called. Otherwise it returns kPending, and `done` runs later on the loop, once
  // the writes have their replies or failed (within the engine's command_timeout; a write
  // that fails is decided as Engine::try_acquire_all decides it, by the limit's failure
  // policy). `items` and `out` need not outlive the call.
  static constexpr std::size_t kPending = Engine::kPending;
  std::size_t try_acquire_all(std::span<const Acquisition> items, std::span<Decision> out,
                              Done done);
  // Decisions whose writes are in flight.
  std::size_t pending() const noexcept;
  // Completes what is in flight now, as failed writes (their `done` run), and closes the
  // connections. Later calls decide synchronously, as the Engine does. Idempotent.
  void close();

 private:
  std::unique_ptr<detail::LoopAcquirer> impl_;
};

}  // namespace v1
}  // namespace ratewin
