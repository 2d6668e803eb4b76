// The C ABI over the C++ API. Every entry point runs inside guarded(): no exception
// leaves the library, and each one becomes a RATEWIN_E* code and a message.
#include "ratewin.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ratewin/ratewin.h"

// (Named, not anonymous: ratewin_engine holds one.)
namespace ratewin_capi {

// The ratewin_engine_try_acquire_all_async calls of one engine, so that closing it is
// safe for their callbacks: once ratewin_engine_close has begun, no call enters the C++
// engine (a callback's call gets RATEWIN_ECLOSED), the engine is not destroyed while a
// call is inside it or a callback that began before the close runs, and the handle is
// not freed before every callback has returned.
class AsyncCalls {
 public:
  AsyncCalls() = default;
  AsyncCalls(const AsyncCalls&) = delete;
  AsyncCalls& operator=(const AsyncCalls&) = delete;
  // Waits for the callbacks still owed. Destroyed after the engine (declared before it in
  // ratewin_engine): its destruction has completed the pending calls, unless limiters
  // keep its store running, and then their replies are awaited here.
  ~AsyncCalls() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return owed_ == 0; });
  }

  // A call enters the engine; false once the engine is closing.
  bool enter() noexcept {
    const std::lock_guard lock(mutex_);
    if (closing_) return false;
    ++inside_;
    ++owed_;
    return true;
  }
  // It has left the engine, with its callback to come (pending) or not.
  void leave(bool pending) noexcept {
    const std::lock_guard lock(mutex_);
    --inside_;
    if (!pending) --owed_;
    if (closing_) changed_.notify_all();
  }
  // A callback begins: the status it is given.
  int callback_begins() noexcept {
    const std::lock_guard lock(mutex_);
    ++running_;
    return closing_ ? RATEWIN_ECLOSED : RATEWIN_OK;
  }
  // It has returned. The caller touches nothing of the engine after this.
  void callback_ends() noexcept {
    const std::lock_guard lock(mutex_);
    --running_;
    --owed_;
    // Under the lock: once it is released, the closing thread may destroy this object.
    if (closing_) changed_.notify_all();
  }
  // ratewin_engine_close: no call enters any more; waits until none is inside the
  // engine and every callback that began before has returned.
  void close() noexcept {
    std::unique_lock lock(mutex_);
    closing_ = true;
    changed_.wait(lock, [this] { return inside_ == 0 && running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool closing_ = false;
  std::size_t inside_ = 0;   // calls inside Engine::try_acquire_all_async
  std::size_t running_ = 0;  // callbacks running
  std::size_t owed_ = 0;     // callbacks not yet returned, of calls entered
};

}  // namespace ratewin_capi

struct ratewin_engine {
  explicit ratewin_engine(ratewin::Options options) : rep(std::move(options)) {}
  ratewin_capi::AsyncCalls async;  // first: outlives rep
  ratewin::Engine rep;
};
struct ratewin_limit {
  ratewin::Limit rep;
};
struct ratewin_limiter {
  ratewin::LimiterHandle rep;
};

namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

static_assert(RATEWIN_LIMIT_MAX_COUNT == ratewin::Limit::kMaxCount);
static_assert(RATEWIN_LIMIT_MAX_SUBINTERVALS == ratewin::Limit::kMaxSubintervals);
static_assert(RATEWIN_LIMIT_MAX_INTERVAL_MS == ratewin::Limit::kMaxInterval.count());
static_assert(RATEWIN_LIMIT_MAX_RESOLUTION_MS == ratewin::Limit::kMaxResolution.count());
static_assert(RATEWIN_NEVER == ratewin::Decision::kNever.count());

// A copy of `text` the caller frees with ratewin_free(); nullptr if malloc fails.
char* copy_string(std::string_view text) noexcept {
  auto* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return nullptr;
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  return copy;
}

[[gnu::cold]] int fail(char** errmsg, int code, std::string_view message) noexcept {
  if (errmsg != nullptr) *errmsg = copy_string(message);
  return code;
}

// Runs `body` (which returns a status code), turning any exception into one.
template <class Body>
int guarded(char** errmsg, Body&& body) noexcept {
  if (errmsg != nullptr) *errmsg = nullptr;
  try {
    return std::forward<Body>(body)();
  } catch (const std::invalid_argument& e) {
    return fail(errmsg, RATEWIN_EINVAL, e.what());
  } catch (const std::length_error& e) {
    return fail(errmsg, RATEWIN_ERANGE, e.what());
  } catch (const std::out_of_range& e) {
    return fail(errmsg, RATEWIN_ERANGE, e.what());
  } catch (const std::bad_alloc&) {
    return fail(errmsg, RATEWIN_ENOMEM, "ratewin: out of memory");
  } catch (const std::system_error& e) {
    return fail(errmsg, RATEWIN_ESYSTEM, e.what());
  } catch (const std::exception& e) {
    return fail(errmsg, RATEWIN_EINTERNAL, e.what());
  } catch (...) {
    return fail(errmsg, RATEWIN_EINTERNAL, "ratewin: unknown exception");
  }
}

// The size of each struct in the release that introduced it (1.0 for all but
// ratewin_acquisition, which came with 1.2, and ratewin_tls_options, with 1.6): a
// caller's size below it cannot be a real struct (most often, size was never set). Written as the end of the last field of that
// release, so that adding fields later leaves it unchanged.
template <class T>
constexpr std::size_t kFirstSize = 0;
template <>
constexpr std::size_t kFirstSize<ratewin_options> = offsetof(ratewin_options, logger_data) +
                                                    sizeof(void*);
template <>
constexpr std::size_t kFirstSize<ratewin_limit_options> = offsetof(ratewin_limit_options,
                                                                   reserved) +
                                                          sizeof(std::int32_t);
template <>
constexpr std::size_t kFirstSize<ratewin_decision> = offsetof(ratewin_decision, retry_after_ns) +
                                                     sizeof(std::int64_t);
template <>
constexpr std::size_t kFirstSize<ratewin_stats> = offsetof(ratewin_stats, clock_rtt_ns) +
                                                  sizeof(std::int64_t);
template <>
constexpr std::size_t kFirstSize<ratewin_acquisition> = offsetof(ratewin_acquisition, cost) +
                                                        sizeof(std::uint64_t);
template <>
constexpr std::size_t kFirstSize<ratewin_tls_options> = offsetof(ratewin_tls_options, reserved) +
                                                        sizeof(std::int32_t);

// No struct has padding (the header promises it): a field added later must never land
// where an older library saw padding it did not check. (A release that adds fields
// compares sizeof with the end of its new last field.)
static_assert(sizeof(ratewin_options) ==
              offsetof(ratewin_options, flush_interval_ms) + sizeof(std::uint32_t));
static_assert(offsetof(ratewin_options, write_mode) ==
              offsetof(ratewin_options, tls) + sizeof(void*));
static_assert(offsetof(ratewin_options, tls) ==
              offsetof(ratewin_options, reserved2) + sizeof(std::int32_t));
static_assert(offsetof(ratewin_options, partition_share) ==
              offsetof(ratewin_options, reserved) + sizeof(std::int32_t));
static_assert(sizeof(ratewin_limit_options) ==
              offsetof(ratewin_limit_options, reserved3) + sizeof(std::int32_t));
static_assert(offsetof(ratewin_limit_options, burst) ==
              offsetof(ratewin_limit_options, reserved2) + sizeof(std::int32_t));
static_assert(offsetof(ratewin_limit_options, mode) ==
              offsetof(ratewin_limit_options, burst) + sizeof(std::uint64_t));
static_assert(sizeof(ratewin_decision) ==
              offsetof(ratewin_decision, reserved) + sizeof(std::int32_t));
static_assert(offsetof(ratewin_decision, would_reject) == kFirstSize<ratewin_decision>);
static_assert(sizeof(ratewin_stats) ==
              offsetof(ratewin_stats, flushed_units) + sizeof(std::uint64_t));
static_assert(offsetof(ratewin_stats, would_reject) ==
              offsetof(ratewin_stats, sync_last_change_sets) + sizeof(std::uint64_t));
static_assert(sizeof(ratewin_acquisition) == kFirstSize<ratewin_acquisition>);
static_assert(sizeof(ratewin_tls_options) == kFirstSize<ratewin_tls_options>);
static_assert(offsetof(ratewin_tls_options, verify) ==
              offsetof(ratewin_tls_options, min_version) + sizeof(const char*));

// Where each figure of ratewin::kStatFields goes in ratewin_stats: its C field (a
// duration's name has _ns after it, in nanoseconds; a flag is an int32_t 0 or 1; a count a
// uint64_t). Checked against the table when this compiles: every figure has its field, and
// every field has its figure.
struct CStat {
  std::string_view name;
  std::size_t offset;
  std::size_t index = 0;  // in kStatFields
};
#define RATEWIN_STAT(field) CStat{#field, offsetof(ratewin_stats, field)}
constexpr CStat kCStatFields[] = {
    RATEWIN_STAT(allowed),          RATEWIN_STAT(rejected),
    RATEWIN_STAT(degraded),         RATEWIN_STAT(limiters),
    RATEWIN_STAT(max_limiters),     RATEWIN_STAT(pinned),
    RATEWIN_STAT(evictions),        RATEWIN_STAT(evictions_active),
    RATEWIN_STAT(store),
    RATEWIN_STAT(store_available),  RATEWIN_STAT(circuit_opens),
    RATEWIN_STAT(connections),      RATEWIN_STAT(writes_ok),
    RATEWIN_STAT(writes_failed),    RATEWIN_STAT(writes_skipped),
    RATEWIN_STAT(write_p50_ns),     RATEWIN_STAT(write_p90_ns),
    RATEWIN_STAT(write_p99_ns),     RATEWIN_STAT(write_max_ns),
    RATEWIN_STAT(warm_starts),      RATEWIN_STAT(warm_start_failures),
    RATEWIN_STAT(sync_rounds),      RATEWIN_STAT(sync_failures),
    RATEWIN_STAT(sync_last_keys),   RATEWIN_STAT(sync_last_duration_ns),
    RATEWIN_STAT(sync_max_duration_ns), RATEWIN_STAT(active_limiters),
    RATEWIN_STAT(clock_offset_ns),  RATEWIN_STAT(clock_rtt_ns),
    RATEWIN_STAT(overflowed),       RATEWIN_STAT(memory),
    RATEWIN_STAT(max_memory),       RATEWIN_STAT(sync_last_change_sets),
    RATEWIN_STAT(would_reject),     RATEWIN_STAT(live_nodes),
    RATEWIN_STAT(flushes),          RATEWIN_STAT(flush_failures),
    RATEWIN_STAT(flushed_units),
};
#undef RATEWIN_STAT

// A figure's C name: its name, with _ns after a duration's.
constexpr bool c_name_is(const ratewin::StatField& f, std::string_view c_name) {
  if (f.unit != ratewin::StatUnit::seconds) return c_name == f.name;
  return c_name.size() == f.name.size() + 3 && c_name.starts_with(f.name) &&
         c_name.ends_with("_ns");
}

// kCStatFields with each field's figure found, or a field left at kNone when none names it.
constexpr std::size_t kNone = ~std::size_t{0};
consteval auto with_figures() {
  std::array<CStat, std::size(kCStatFields)> out{};
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = kCStatFields[i];
    out[i].index = kNone;
    for (std::size_t j = 0; j < std::size(ratewin::kStatFields); ++j)
      if (c_name_is(ratewin::kStatFields[j], out[i].name)) out[i].index = j;
  }
  return out;
}
constexpr auto kCStats = with_figures();

consteval bool c_stats_match_the_table() {
  for (const CStat& c : kCStats)
    if (c.index == kNone) return false;  // a C field no figure names
  for (std::size_t j = 0; j < std::size(ratewin::kStatFields); ++j) {
    std::size_t fields = 0;
    for (const CStat& c : kCStats) fields += c.index == j ? 1 : 0;
    if (fields != 1) return false;  // a figure without its C field (or with two)
  }
  // And no C field is missing from the list: with `size`, the fields listed make the
  // whole struct.
  std::size_t bytes = sizeof(std::size_t);
  for (const CStat& c : kCStats)
    bytes += ratewin::kStatFields[c.index].flag != nullptr ? sizeof(std::int32_t) : sizeof(std::uint64_t);
  return bytes == sizeof(ratewin_stats);
}
static_assert(c_stats_match_the_table(),
              "ratewin_stats and ratewin::kStatFields must name the same figures");

template <class T>
bool size_too_small(const T* s) noexcept {
  return s->size < kFirstSize<T>;
}

// Reads a caller's struct over `defaults`: the fields its size covers replace the
// defaults. A caller built against a newer header may pass a larger struct; its fields
// unknown here must then be 0 (their default), or the call fails instead of silently
// ignoring a setting.
template <class T>
int read_sized(const T* in, T& defaults, const char* what, char** errmsg) {
  if (in == nullptr) return fail(errmsg, RATEWIN_EINVAL, std::string(what) + " is NULL");
  if (size_too_small(in)) {
    return fail(errmsg, RATEWIN_EINVAL,
                std::string(what) + ": size " + std::to_string(in->size) +
                    " is too small (set it with the struct's _init function)");
  }
  const std::size_t covered = in->size < sizeof(T) ? in->size : sizeof(T);
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (std::size_t i = sizeof(T); i < in->size; ++i) {
    if (bytes[i] != 0) {
      return fail(errmsg, RATEWIN_EINVAL,
                  std::string(what) + ": a field this library version (" +
                      ratewin_version_string() + ") does not know is set");
    }
  }
  const std::size_t size = defaults.size;
  std::memcpy(&defaults, in, covered);
  defaults.size = size;
  return RATEWIN_OK;
}

// Writes `value` into a caller's struct, only the bytes its size covers; its size is
// kept.
template <class T>
void write_sized(const T& value, T* out) noexcept {
  const std::size_t size = out->size;
  if (size >= sizeof(T)) {
    *out = value;
  } else {
    std::memcpy(out, &value, size);
  }
  out->size = size;
}

// A caller's output struct: not NULL, size set.
template <class T>
int check_out(const T* out, const char* what, char** errmsg) noexcept {
  if (out == nullptr) return fail(errmsg, RATEWIN_EINVAL, std::string_view(what));
  if (size_too_small(out)) {
    return fail(errmsg, RATEWIN_EINVAL, "the output struct's size is too small (call its _init)");
  }
  return RATEWIN_OK;
}

// The name of element i of an array, "items[12]", for messages; built without
// allocating, since it is made for every element read.
class ElementName {
 public:
  ElementName(std::string_view array, std::size_t i) noexcept {
    const std::size_t n = array.size() < kMaxArrayName ? array.size() : kMaxArrayName;
    std::memcpy(text_, array.data(), n);
    char* at = text_ + n;
    *at++ = '[';
    at = std::to_chars(at, text_ + sizeof text_ - 2, i).ptr;
    *at++ = ']';
    *at = '\0';
  }
  const char* c_str() const noexcept { return text_; }

 private:
  static constexpr std::size_t kMaxArrayName = 16;
  // The name, '[', at most 20 digits, ']' and the NUL.
  char text_[kMaxArrayName + 23];
};

// Element i of a caller's array of size-first structs, `stride` bytes apart.
template <class T>
T* element(T* first, std::size_t stride, std::size_t i) noexcept {
  using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(first) + i * stride);
}

// Checks a caller's array of `count` size-first structs (count > 0) and gives its stride,
// the first element's size (the header's "Growing structs"): at least kFirstSize, a
// multiple of the struct's alignment (so every element is where a T can be), the same in
// every element, and small enough that `count` of them fit in the address space.
template <class T>
int check_array(const T* first, std::size_t count, std::string_view what, std::size_t& stride,
                char** errmsg) {
  if (first == nullptr) return fail(errmsg, RATEWIN_EINVAL, std::string(what) + " is NULL");
  const std::size_t size = first->size;
  if (size_too_small(first) || size % alignof(T) != 0) {
    return fail(errmsg, RATEWIN_EINVAL,
                std::string(what) + "[0].size " + std::to_string(size) +
                    " is not the size of an element (set each with the struct's _init function)");
  }
  if (count > SIZE_MAX / size) {
    return fail(errmsg, RATEWIN_ERANGE,
                std::string(what) + ": " + std::to_string(count) + " elements of " +
                    std::to_string(size) + " bytes exceed the address space");
  }
  for (std::size_t i = 1; i < count; ++i) {
    const std::size_t size_i = element(first, size, i)->size;
    if (size_i != size) {
      return fail(errmsg, RATEWIN_EINVAL,
                  ElementName(what, i).c_str() + std::string(".size ") + std::to_string(size_i) +
                      " differs from " + std::string(what) + "[0].size " + std::to_string(size) +
                      ": every element must have the same size");
    }
  }
  stride = size;
  return RATEWIN_OK;
}

// Writes a decision's fields in place. Building a ratewin_decision on the stack and
// copying it into the caller's would cost a store-forwarding stall on every call (the
// copy's 16-byte loads span the fields' narrower stores), a third of the C ABI's
// overhead.
[[gnu::always_inline]] inline void fill_decision(const ratewin::Decision& d,
                                                 ratewin_decision* out) noexcept {
  out->allowed = d.allowed ? 1 : 0;
  out->degraded = d.degraded ? 1 : 0;
  out->limit = d.limit;
  out->remaining = d.remaining;
  out->reset_after_ns = d.reset_after.count();
  out->retry_after_ns = d.retry_after.count();
  out->would_reject = d.would_reject ? 1 : 0;
  out->reserved = 0;
}

// A caller's struct smaller than this library's (built against an older header): only
// the part its size covers.
[[gnu::cold, gnu::noinline]] void write_older_decision(const ratewin::Decision& d,
                                                       ratewin_decision* out) noexcept {
  ratewin_decision full{};
  full.size = sizeof full;
  fill_decision(d, &full);
  write_sized(full, out);
}

[[gnu::always_inline]] inline void write_decision(const ratewin::Decision& d,
                                                  ratewin_decision* out) noexcept {
  if (out->size < sizeof *out) {
    write_older_decision(d, out);
  } else {
    fill_decision(d, out);
  }
}

ratewin::Decision from_c(const ratewin_decision& c) noexcept {
  ratewin::Decision d;
  d.allowed = c.allowed != 0;
  d.degraded = c.degraded != 0;
  d.limit = c.limit;
  d.remaining = c.remaining;
  d.reset_after = nanoseconds(c.reset_after_ns);
  d.retry_after = nanoseconds(c.retry_after_ns);
  return d;
}

// The clock of ratewin_options, as the engine's Clock.
class CallbackClock final : public ratewin::Clock {
 public:
  CallbackClock(ratewin_clock_fn fn, void* data) : fn_(fn), data_(data) {}
  // Within [0, 2^62] ns, where every engine computation on times is defined.
  nanoseconds now() const noexcept override {
    constexpr std::int64_t kLatest = std::int64_t{1} << 62;
    const std::int64_t t = fn_(data_);
    return nanoseconds(t < 0 ? 0 : (t > kLatest ? kLatest : t));
  }

 private:
  ratewin_clock_fn fn_;
  void* data_;
};

// The C constants are the C++ enums' values, so that a default crosses as it is.
static_assert(RATEWIN_FAILURE_LOCAL == static_cast<int>(ratewin::FailurePolicy::local));
static_assert(RATEWIN_FAILURE_OPEN == static_cast<int>(ratewin::FailurePolicy::open));
static_assert(RATEWIN_FAILURE_CLOSED == static_cast<int>(ratewin::FailurePolicy::closed));
static_assert(RATEWIN_FAILURE_PARTITIONED ==
              static_cast<int>(ratewin::FailurePolicy::partitioned));
static_assert(RATEWIN_WRITE_SYNC == static_cast<int>(ratewin::WriteMode::sync));
static_assert(RATEWIN_WRITE_BATCHED == static_cast<int>(ratewin::WriteMode::batched));
static_assert(RATEWIN_TLS_VERIFY_FULL == static_cast<int>(ratewin::TlsVerify::full));
static_assert(RATEWIN_TLS_VERIFY_CA == static_cast<int>(ratewin::TlsVerify::ca));
static_assert(RATEWIN_TLS_VERIFY_NONE == static_cast<int>(ratewin::TlsVerify::none));

// The TLS settings of ratewin_options.tls (already read over its defaults). The files, the
// version and the name are the engine's to check.
ratewin::TlsOptions to_cxx(const ratewin_tls_options& c) {
  ratewin::TlsOptions o;
  if (c.reserved != 0) throw std::invalid_argument("ratewin_tls_options: reserved must be 0");
  switch (c.verify) {
    case RATEWIN_TLS_VERIFY_FULL:
    case RATEWIN_TLS_VERIFY_CA:
    case RATEWIN_TLS_VERIFY_NONE:
      o.verify = static_cast<ratewin::TlsVerify>(c.verify);
      break;
    default:
      throw std::invalid_argument("ratewin_tls_options: unknown verify " +
                                  std::to_string(c.verify) +
                                  " (RATEWIN_TLS_VERIFY_FULL, _CA or _NONE)");
  }
  if (c.ca_file != nullptr) o.ca_file = c.ca_file;
  if (c.ca_dir != nullptr) o.ca_dir = c.ca_dir;
  if (c.cert_file != nullptr) o.cert_file = c.cert_file;
  if (c.key_file != nullptr) o.key_file = c.key_file;
  if (c.server_name != nullptr) o.server_name = c.server_name;
  if (c.min_version != nullptr) o.min_version = c.min_version;
  return o;
}

ratewin::Options to_cxx(const ratewin_options& c, const ratewin_tls_options& tls) {
  ratewin::Options o;
  o.tls = to_cxx(tls);
  if (c.max_limiters > SIZE_MAX) {
    throw std::invalid_argument("max_limiters " + std::to_string(c.max_limiters) +
                                " is more than this platform's SIZE_MAX");
  }
  o.max_limiters = static_cast<std::size_t>(c.max_limiters);
  if (c.max_memory > SIZE_MAX) {
    throw std::invalid_argument("max_memory " + std::to_string(c.max_memory) +
                                " is more than this platform's SIZE_MAX");
  }
  o.max_memory = static_cast<std::size_t>(c.max_memory);
  if (c.require_store != 0 && c.require_store != 1)
    throw std::invalid_argument("ratewin_options: require_store must be 0 or 1");
  if (c.reserved != 0) throw std::invalid_argument("ratewin_options: reserved must be 0");
  o.require_store = c.require_store == 1;
  if (c.reserved2 != 0) throw std::invalid_argument("ratewin_options: reserved2 must be 0");
  if (c.partition_share != 0) o.partition_share = c.partition_share;
  if (c.partitioned_unknown == RATEWIN_FAILURE_CLOSED) {
    o.partitioned_unknown = ratewin::FailurePolicy::closed;
  } else if (c.partitioned_unknown != RATEWIN_FAILURE_LOCAL) {
    throw std::invalid_argument(
        "ratewin_options: partitioned_unknown must be RATEWIN_FAILURE_LOCAL or "
        "RATEWIN_FAILURE_CLOSED");
  }
  if (c.write_mode == RATEWIN_WRITE_BATCHED) {
    o.write_mode = ratewin::WriteMode::batched;
  } else if (c.write_mode != RATEWIN_WRITE_SYNC) {
    throw std::invalid_argument(
        "ratewin_options: write_mode must be RATEWIN_WRITE_SYNC or RATEWIN_WRITE_BATCHED");
  }
  o.flush_interval = milliseconds(c.flush_interval_ms);
  if (c.redis != nullptr) o.redis = c.redis;
  if (c.key_prefix != nullptr) o.key_prefix = c.key_prefix;
  o.connect_timeout = milliseconds(c.connect_timeout_ms);
  o.command_timeout = milliseconds(c.command_timeout_ms);
  o.max_connections = c.max_connections;
  o.sync_settle = milliseconds(c.sync_settle_ms);
  o.sync_clock = c.sync_clock != 0;
  o.clock_sync_interval = milliseconds(c.clock_sync_interval_ms);
  if (c.clock != nullptr) o.clock = std::make_shared<CallbackClock>(c.clock, c.clock_data);
  if (c.logger != nullptr) {
    o.logger = [fn = c.logger, data = c.logger_data](ratewin::LogLevel level,
                                                     std::string_view message) {
      const std::string text(message);  // NUL-terminated for C
      fn(data, static_cast<int>(level), text.c_str(), text.size());
    };
  }
  return o;
}

// Milliseconds given unsigned, as a duration: one past INT64_MAX ms reads as INT64_MAX ms
// (longer than any bound, and refused as such), never as a negative duration.
std::chrono::milliseconds to_milliseconds(std::uint64_t ms) noexcept {
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(std::min<std::uint64_t>(ms, std::uint64_t{INT64_MAX})));
}

ratewin::FailurePolicy to_policy(std::int32_t policy) {
  switch (policy) {
    case RATEWIN_FAILURE_LOCAL:
      return ratewin::FailurePolicy::local;
    case RATEWIN_FAILURE_OPEN:
      return ratewin::FailurePolicy::open;
    case RATEWIN_FAILURE_CLOSED:
      return ratewin::FailurePolicy::closed;
    case RATEWIN_FAILURE_PARTITIONED:
      return ratewin::FailurePolicy::partitioned;
    default:
      throw std::invalid_argument("ratewin_limit_options: unknown failure_policy " +
                                  std::to_string(policy));
  }
}

static_assert(RATEWIN_ALGORITHM_SLIDING_WINDOW ==
              static_cast<int>(ratewin::Algorithm::sliding_window));
static_assert(RATEWIN_ALGORITHM_STRICT_WINDOW ==
              static_cast<int>(ratewin::Algorithm::strict_window));
static_assert(RATEWIN_ALGORITHM_FIXED_WINDOW == static_cast<int>(ratewin::Algorithm::fixed_window));
static_assert(RATEWIN_ALGORITHM_TOKEN_BUCKET == static_cast<int>(ratewin::Algorithm::token_bucket));
static_assert(RATEWIN_ALGORITHM_SLIDING_LOG == static_cast<int>(ratewin::Algorithm::sliding_log));
static_assert(RATEWIN_LIMIT_MAX_LOG_COUNT == ratewin::Limit::kMaxLogCount);

// A RATEWIN_ALGORITHM_* value as the Algorithm it names; false for an unknown one.
bool to_algorithm(std::int32_t value, ratewin::Algorithm& out) noexcept {
  switch (value) {
    case RATEWIN_ALGORITHM_SLIDING_WINDOW:
    case RATEWIN_ALGORITHM_STRICT_WINDOW:
    case RATEWIN_ALGORITHM_FIXED_WINDOW:
    case RATEWIN_ALGORITHM_TOKEN_BUCKET:
    case RATEWIN_ALGORITHM_SLIDING_LOG:
      out = static_cast<ratewin::Algorithm>(value);
      return true;
    default:
      return false;
  }
}

// The macro naming an algorithm, for messages.
const char* algorithm_macro(ratewin::Algorithm algorithm) noexcept {
  switch (algorithm) {
    case ratewin::Algorithm::strict_window:
      return "RATEWIN_ALGORITHM_STRICT_WINDOW";
    case ratewin::Algorithm::fixed_window:
      return "RATEWIN_ALGORITHM_FIXED_WINDOW";
    case ratewin::Algorithm::token_bucket:
      return "RATEWIN_ALGORITHM_TOKEN_BUCKET";
    case ratewin::Algorithm::sliding_log:
      return "RATEWIN_ALGORITHM_SLIDING_LOG";
    case ratewin::Algorithm::sliding_window:
      break;
  }
  return "RATEWIN_ALGORITHM_SLIDING_WINDOW";
}

std::int32_t from_policy(ratewin::FailurePolicy policy) noexcept {
  switch (policy) {
    case ratewin::FailurePolicy::open:
      return RATEWIN_FAILURE_OPEN;
    case ratewin::FailurePolicy::closed:
      return RATEWIN_FAILURE_CLOSED;
    case ratewin::FailurePolicy::partitioned:
      return RATEWIN_FAILURE_PARTITIONED;
    case ratewin::FailurePolicy::local:
      break;
  }
  return RATEWIN_FAILURE_LOCAL;
}

// The arguments every try-acquire checks.
int check_acquire(const void* handle, const char* handle_name, const ratewin_decision* decision,
                  char** errmsg) noexcept {
  if (handle == nullptr) {
    return fail(errmsg, RATEWIN_EINVAL, std::string_view(handle_name));
  }
  return check_out(decision, "decision is NULL", errmsg);
}

// The arguments of a try_acquire_all call, checked and read.
struct AllCall {
  std::vector<ratewin::Acquisition> items;
  std::size_t decision_stride = 0;
};

// Checks the arguments every try_acquire_all takes and reads the items into `call`;
// nothing is written to the caller's memory but *refused = 0 when count is 0 (no limit to
// refuse: admitted, as by the C++ call).
int read_all_call(const ratewin_engine* engine, const ratewin_acquisition* items, std::size_t count,
                  const ratewin_decision* decisions, std::size_t* refused, AllCall& call,
                  char** errmsg) {
  if (engine == nullptr) return fail(errmsg, RATEWIN_EINVAL, "engine is NULL");
  if (refused == nullptr) return fail(errmsg, RATEWIN_EINVAL, "refused is NULL");
  if (count == 0) {
    *refused = 0;
    return RATEWIN_OK;
  }
  std::size_t item_stride = 0;
  if (const int rc = check_array(items, count, "items", item_stride, errmsg); rc != 0) {
    return rc;
  }
  if (const int rc = check_array(decisions, count, "decisions", call.decision_stride, errmsg);
      rc != 0) {
    return rc;
  }
  call.items.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const ElementName name("items", i);
    ratewin_acquisition a;
    ratewin_acquisition_init(&a);
    if (const int rc = read_sized(element(items, item_stride, i), a, name.c_str(), errmsg);
        rc != 0) {
      return rc;
    }
    if (a.limit == nullptr) {
      return fail(errmsg, RATEWIN_EINVAL, name.c_str() + std::string(".limit is NULL"));
    }
    call.items.push_back({a.resource, a.limit->rep, a.cost});
  }
  return RATEWIN_OK;
}

// Writes every decision of a try_acquire_all into the caller's array.
void write_decisions(std::span<const ratewin::Decision> made, ratewin_decision* decisions,
                     std::size_t stride) noexcept {
  for (std::size_t i = 0; i < made.size(); ++i) {
    write_decision(made[i], element(decisions, stride, i));
  }
}

}  // namespace

extern "C" {

unsigned int ratewin_version(void) { return RATEWIN_VERSION_HEX; }

#define RATEWIN_STRINGIFY_(x) #x
#define RATEWIN_STRINGIFY(x) RATEWIN_STRINGIFY_(x)
const char* ratewin_version_string(void) {
  return RATEWIN_STRINGIFY(RATEWIN_VERSION_MAJOR) "." RATEWIN_STRINGIFY(
      RATEWIN_VERSION_MINOR) "." RATEWIN_STRINGIFY(RATEWIN_VERSION_PATCH);
}

const char* ratewin_strerror(int code) {
  switch (code) {
    case RATEWIN_OK:
      return "success";
    case RATEWIN_EINVAL:
      return "invalid argument";
    case RATEWIN_ENOMEM:
      return "out of memory";
    case RATEWIN_ERANGE:
      return "out of range";
    case RATEWIN_ENOSPC:
      return "buffer too small";
    case RATEWIN_ESYSTEM:
      return "system error";
    case RATEWIN_EINTERNAL:
      return "internal error";
    case RATEWIN_ECLOSED:
      return "engine being closed";
    case RATEWIN_EUNAVAILABLE:
      return "the shared store cannot be used";
    case RATEWIN_PENDING:
      return "pending: the outcome comes through the callback";
    default:
      return "unknown error";
  }
}

const char* ratewin_err_name(int code) {
  switch (code) {
    case RATEWIN_OK:
      return "RATEWIN_OK";
    case RATEWIN_EINVAL:
      return "RATEWIN_EINVAL";
    case RATEWIN_ENOMEM:
      return "RATEWIN_ENOMEM";
    case RATEWIN_ERANGE:
      return "RATEWIN_ERANGE";
    case RATEWIN_ENOSPC:
      return "RATEWIN_ENOSPC";
    case RATEWIN_ESYSTEM:
      return "RATEWIN_ESYSTEM";
    case RATEWIN_EINTERNAL:
      return "RATEWIN_EINTERNAL";
    case RATEWIN_ECLOSED:
      return "RATEWIN_ECLOSED";
    case RATEWIN_EUNAVAILABLE:
      return "RATEWIN_EUNAVAILABLE";
    case RATEWIN_PENDING:
      return "RATEWIN_PENDING";
    default:
      return "RATEWIN_UNKNOWN";
  }
}

void ratewin_free(void* pointer) { std::free(pointer); }

uint64_t ratewin_hash(const char* name, size_t length) {
  if (name == nullptr) return ratewin::hash(std::string_view());
  return ratewin::hash(std::string_view(name, length));
}

void ratewin_limit_options_init(ratewin_limit_options* options) {
  if (options == nullptr) return;
  *options = ratewin_limit_options{};
  options->size = sizeof *options;
  options->failure_policy = RATEWIN_FAILURE_LOCAL;
  options->algorithm = RATEWIN_ALGORITHM_SLIDING_WINDOW;
}

namespace {

// Reads a caller's ratewin_limit_options into `spec` (NULL `options`: the defaults, when
// `allow_null`): RATEWIN_OK, or RATEWIN_EINVAL with errmsg naming the problem.
int read_limit_options(const ratewin_limit_options* options, bool allow_null,
                       ratewin::LimitSpec& spec, char** errmsg) {
  ratewin_limit_options o;
  ratewin_limit_options_init(&o);
  if (options != nullptr || !allow_null) {
    if (const int rc = read_sized(options, o, "ratewin_limit_options", errmsg); rc != 0)
      return rc;
  }
  if (o.reserved != 0) {
    return fail(errmsg, RATEWIN_EINVAL, "ratewin_limit_options: reserved must be 0");
  }
  if (o.reserved2 != 0) {
    return fail(errmsg, RATEWIN_EINVAL, "ratewin_limit_options: reserved2 must be 0");
  }
  if (o.reserved3 != 0) {
    return fail(errmsg, RATEWIN_EINVAL, "ratewin_limit_options: reserved3 must be 0");
  }
  if (o.mode != RATEWIN_MODE_ENFORCE && o.mode != RATEWIN_MODE_SHADOW) {
    return fail(errmsg, RATEWIN_EINVAL,
                "ratewin_limit_options: unknown mode " + std::to_string(o.mode) +
                    " (RATEWIN_MODE_ENFORCE or RATEWIN_MODE_SHADOW)");
  }
  if (!to_algorithm(o.algorithm, spec.algorithm)) {
    return fail(errmsg, RATEWIN_EINVAL,
                "ratewin_limit_options: unknown algorithm " + std::to_string(o.algorithm) +
                    " (RATEWIN_ALGORITHM_SLIDING_WINDOW, _STRICT_WINDOW, _FIXED_WINDOW, "
                    "_TOKEN_BUCKET or _SLIDING_LOG)");
  }
  spec.max = o.max;
  spec.interval = to_milliseconds(o.interval_ms);
  if (o.resolution_ms != 0) spec.resolution = to_milliseconds(o.resolution_ms);
  spec.burst = o.burst;
  spec.failure_policy = to_policy(o.failure_policy);
  spec.mode = o.mode == RATEWIN_MODE_SHADOW ? ratewin::Mode::shadow : ratewin::Mode::enforce;
  spec.scope = o.scope;
  return RATEWIN_OK;
}

// The limits `text` names over `options` for ratewin_limit_parse and ratewin_limits_parse
// (`where`), or the status code with errmsg set.
int parsed_limits(const char* text, const ratewin_limit_options* options, const char* where,
                  bool many, std::vector<ratewin::Limit>& limits, char** errmsg) {
  if (text == nullptr) return fail(errmsg, RATEWIN_EINVAL, std::string(where) + ": text is NULL");
  ratewin::LimitSpec base;
  if (const int rc = read_limit_options(options, true, base, errmsg); rc != 0) return rc;
  if (base.max != 0 || base.interval.count() != 0) {
    return fail(errmsg, RATEWIN_EINVAL,
                std::string(where) + ": options' max and interval_ms must be 0 (the text gives them)");
  }
  if (many) {
    auto read = ratewin::parse_limits(text, base);
    if (std::string* error = std::get_if<std::string>(&read))
      return fail(errmsg, RATEWIN_EINVAL, std::string(where) + ": " + *error);
    limits = std::get<std::vector<ratewin::Limit>>(std::move(read));
  } else {
    auto read = ratewin::parse_limit(text, base);
    if (std::string* error = std::get_if<std::string>(&read))
      return fail(errmsg, RATEWIN_EINVAL, std::string(where) + ": " + *error);
    limits.push_back(std::get<ratewin::Limit>(read));
  }
  return RATEWIN_OK;
}

}  // namespace

int ratewin_limit_new(const ratewin_limit_options* options, ratewin_limit** out, char** errmsg) {
  return guarded(errmsg, [&] {
    ratewin::LimitSpec spec;
    if (const int rc = read_limit_options(options, false, spec, errmsg); rc != 0) return rc;
    if (out == nullptr) return fail(errmsg, RATEWIN_EINVAL, "ratewin_limit_new: out is NULL");
    auto made = ratewin::Limit::from_spec(spec);
    if (const ratewin::LimitIssue* issue = std::get_if<ratewin::LimitIssue>(&made)) {
      // In this struct's terms: its field names, durations in ms, the algorithms' macros.
      ratewin::LimitTerms terms;
      terms.interval = "interval_ms";
      terms.resolution = "resolution_ms";
      terms.duration = [](std::chrono::milliseconds d) { return std::to_string(d.count()); };
      terms.algorithm = [](ratewin::Algorithm a) { return std::string(algorithm_macro(a)); };
      return fail(errmsg, RATEWIN_EINVAL,
                  "ratewin_limit_options: " + ratewin::describe(*issue, spec, terms));
    }
    *out = new ratewin_limit{std::get<ratewin::Limit>(made)};
    return RATEWIN_OK;
  });
}

int ratewin_limit_parse(const char* text, const ratewin_limit_options* options,
                        ratewin_limit** out, char** errmsg) {
  return guarded(errmsg, [&] {
    if (out == nullptr) return fail(errmsg, RATEWIN_EINVAL, "ratewin_limit_parse: out is NULL");
    std::vector<ratewin::Limit> limits;
    if (const int rc = parsed_limits(text, options, "ratewin_limit_parse", false, limits, errmsg);
        rc != 0)
      return rc;
    *out = new ratewin_limit{limits.front()};
    return RATEWIN_OK;
  });
}

int ratewin_limits_parse(const char* text, const ratewin_limit_options* options,
                         ratewin_limit** out, size_t capacity, size_t* count, char** errmsg) {
  return guarded(errmsg, [&] {
    if (count == nullptr) return fail(errmsg, RATEWIN_EINVAL, "ratewin_limits_parse: count is NULL");
    if (out == nullptr && capacity != 0)
      return fail(errmsg, RATEWIN_EINVAL, "ratewin_limits_parse: out is NULL");
    std::vector<ratewin::Limit> limits;
    if (const int rc = parsed_limits(text, options, "ratewin_limits_parse", true, limits, errmsg);
        rc != 0)
      return rc;
    *count = limits.size();
    if (limits.size() > capacity) {
      return fail(errmsg, RATEWIN_ENOSPC,
                  "ratewin_limits_parse: " + std::to_string(limits.size()) +
                      " limits in the text, room for " + std::to_string(capacity));
    }
    // All made before any is handed out: a failed allocation leaves `out` untouched.
    std::vector<std::unique_ptr<ratewin_limit>> made;
    made.reserve(limits.size());
    for (const ratewin::Limit& l : limits) made.push_back(std::make_unique<ratewin_limit>(ratewin_limit{l}));
    for (std::size_t i = 0; i < made.size(); ++i) out[i] = made[i].release();
    return RATEWIN_OK;
  });
}

void ratewin_limit_free(ratewin_limit* limit) { delete limit; }

int ratewin_limit_get(const ratewin_limit* limit, ratewin_limit_options* out) {
  return guarded(nullptr, [&] {
    if (limit == nullptr) return RATEWIN_EINVAL;
    if (const int rc = check_out(out, "out is NULL", nullptr); rc != 0) return rc;
    ratewin_limit_options o;
    ratewin_limit_options_init(&o);
    o.max = limit->rep.max();
    o.interval_ms = static_cast<std::uint64_t>(limit->rep.interval().count());
    o.resolution_ms = static_cast<std::uint64_t>(limit->rep.resolution().count());
    o.failure_policy = from_policy(limit->rep.failure_policy());
    o.scope = limit->rep.has_scope() ? limit->rep.scope() : 0;
    o.algorithm = static_cast<std::int32_t>(limit->rep.algorithm());
    // The burst in effect; 0 (the only value accepted) for the algorithms without one.
    o.burst = limit->rep.algorithm() == ratewin::Algorithm::token_bucket ? limit->rep.burst() : 0;
    o.mode = limit->rep.mode() == ratewin::Mode::shadow ? RATEWIN_MODE_SHADOW : RATEWIN_MODE_ENFORCE;
    write_sized(o, out);
    return RATEWIN_OK;
  });
}

void ratewin_decision_init(ratewin_decision* decision) {
  if (decision == nullptr) return;
  *decision = ratewin_decision{};
  decision->size = sizeof *decision;
}

int ratewin_decision_header(const ratewin_decision* decision, size_t index, const char** name,
                            char* value, size_t value_size) {
  return guarded(nullptr, [&] {
    if (decision == nullptr || name == nullptr || value == nullptr) return RATEWIN_EINVAL;
    if (size_too_small(decision)) return RATEWIN_EINVAL;
    const auto fields = ratewin::headers(from_c(*decision));
    if (index >= fields.size()) return RATEWIN_ERANGE;
    const ratewin::HeaderField& field = fields[index];
    if (field.value.size() + 1 > value_size) return RATEWIN_ENOSPC;
    std::memcpy(value, field.value.c_str(), field.value.size() + 1);
    *name = field.name.data();  // a string literal: NUL-terminated
    return RATEWIN_OK;
  });
}

void ratewin_options_init(ratewin_options* options) {
  if (options == nullptr) return;
  const ratewin::Options d;
  *options = ratewin_options{};
  options->size = sizeof *options;
  options->max_limiters = d.max_limiters;
  options->max_memory = d.max_memory;
  options->partition_share = d.partition_share;
  options->partitioned_unknown = static_cast<std::int32_t>(d.partitioned_unknown);
  options->write_mode = static_cast<std::int32_t>(d.write_mode);
  options->flush_interval_ms = static_cast<std::uint32_t>(d.flush_interval.count());
  options->connect_timeout_ms = static_cast<std::uint32_t>(d.connect_timeout.count());
  options->command_timeout_ms = static_cast<std::uint32_t>(d.command_timeout.count());
  options->max_connections = static_cast<std::uint32_t>(d.max_connections);
  options->sync_settle_ms = static_cast<std::uint32_t>(d.sync_settle.count());
  options->sync_clock = d.sync_clock ? 1 : 0;
  options->clock_sync_interval_ms = static_cast<std::uint32_t>(d.clock_sync_interval.count());
}

void ratewin_tls_options_init(ratewin_tls_options* options) {
  if (options == nullptr) return;
  *options = ratewin_tls_options{};
  options->size = sizeof *options;
  options->verify = static_cast<std::int32_t>(ratewin::TlsOptions{}.verify);
}

int ratewin_engine_open(const ratewin_options* options, ratewin_engine** out, char** errmsg) {
  return guarded(errmsg, [&] {
    ratewin_options o;
    ratewin_options_init(&o);
    if (options != nullptr) {
      if (const int rc = read_sized(options, o, "ratewin_options", errmsg); rc != 0) return rc;
    }
    // Read (over its defaults) here, where its size is checked as any struct's.
    ratewin_tls_options tls;
    ratewin_tls_options_init(&tls);
    if (o.tls != nullptr) {
      if (const int rc = read_sized(o.tls, tls, "ratewin_tls_options", errmsg); rc != 0) return rc;
    }
    if (out == nullptr) return fail(errmsg, RATEWIN_EINVAL, "ratewin_engine_open: out is NULL");
    try {
      *out = new ratewin_engine(to_cxx(o, tls));
    } catch (const ratewin::StoreError& e) {
      return fail(errmsg, RATEWIN_EUNAVAILABLE, e.what());
    }
    return RATEWIN_OK;
  });
}

void ratewin_engine_close(ratewin_engine* engine) {
  if (engine == nullptr) return;
  engine->async.close();
  // The engine's destruction completes its pending asynchronous calls (their writes fail
  // as the store shuts down); the handle's, their callbacks owed beyond that.
  delete engine;
}

int ratewin_engine_try_acquire(ratewin_engine* engine, uint64_t resource,
                               const ratewin_limit* limit, uint64_t cost,
                               ratewin_decision* decision, char** errmsg) {
  return guarded(errmsg, [&] {
    if (const int rc = check_acquire(engine, "engine is NULL", decision, errmsg); rc != 0) {
      return rc;
    }
    if (limit == nullptr) return fail(errmsg, RATEWIN_EINVAL, "limit is NULL");
    write_decision(engine->rep.try_acquire(resource, limit->rep, cost), decision);
    return RATEWIN_OK;
  });
}

int ratewin_engine_try_acquire_name(ratewin_engine* engine, const char* name, size_t length,
                                    const ratewin_limit* limit, uint64_t cost,
                                    ratewin_decision* decision, char** errmsg) {
  if (name == nullptr && length != 0) return fail(errmsg, RATEWIN_EINVAL, "name is NULL");
  return ratewin_engine_try_acquire(engine, ratewin_hash(name, length), limit, cost, decision,
                                    errmsg);
}

void ratewin_acquisition_init(ratewin_acquisition* acquisition) {
  if (acquisition == nullptr) return;
  *acquisition = ratewin_acquisition{};
  acquisition->size = sizeof *acquisition;
  acquisition->cost = 1;
}

int ratewin_engine_try_acquire_all(ratewin_engine* engine, const ratewin_acquisition* items,
                                   size_t count, ratewin_decision* decisions, size_t* refused,
                                   char** errmsg) {
  return guarded(errmsg, [&] {
    AllCall call;
    if (const int rc = read_all_call(engine, items, count, decisions, refused, call, errmsg);
        rc != RATEWIN_OK || count == 0) {
      return rc;
    }
    std::vector<ratewin::Decision> out(count);
    const std::size_t refusing = engine->rep.try_acquire_all(call.items, out);
    write_decisions(out, decisions, call.decision_stride);
    *refused = refusing;
    return RATEWIN_OK;
  });
}

int ratewin_engine_try_acquire_all_async(ratewin_engine* engine, const ratewin_acquisition* items,
                                         size_t count, ratewin_decision* decisions, size_t* refused,
                                         ratewin_acquire_fn done, void* data, char** errmsg) {
  return guarded(errmsg, [&] {
    if (done == nullptr) return fail(errmsg, RATEWIN_EINVAL, "done is NULL");
    AllCall call;
    if (const int rc = read_all_call(engine, items, count, decisions, refused, call, errmsg);
        rc != RATEWIN_OK || count == 0) {
      return rc;
    }
    if (!engine->async.enter()) {
      return fail(errmsg, RATEWIN_ECLOSED, "the engine is being closed");
    }
    // Left with the callback owed only once the engine has said the call is pending.
    struct Leave {
      ratewin_capi::AsyncCalls& calls;
      bool pending = false;
      ~Leave() { calls.leave(pending); }
    } leave{engine->async};
    std::vector<ratewin::Decision> out(count);
    const std::size_t stride = call.decision_stride;
    const std::size_t refusing = engine->rep.try_acquire_all_async(
        call.items, out,
        [engine, decisions, stride, done, data](std::size_t refused_at,
                                                std::span<const ratewin::Decision> made) noexcept {
          write_decisions(made, decisions, stride);
          const int status = engine->async.callback_begins();
          done(data, status, refused_at, decisions, made.size());
          engine->async.callback_ends();
        });
    if (refusing == ratewin::Engine::kPending) {
      leave.pending = true;
      return RATEWIN_PENDING;
    }
    write_decisions(out, decisions, stride);
    *refused = refusing;
    return RATEWIN_OK;
  });
}

int ratewin_engine_reset(ratewin_engine* engine, uint64_t resource, const ratewin_limit* limit,
                         int32_t* shared_cleared, char** errmsg) {
  return guarded(errmsg, [&] {
    if (engine == nullptr) return fail(errmsg, RATEWIN_EINVAL, "engine is NULL");
    if (limit == nullptr) return fail(errmsg, RATEWIN_EINVAL, "limit is NULL");
    const bool cleared = engine->rep.reset(resource, limit->rep);
    if (shared_cleared != nullptr) *shared_cleared = cleared ? 1 : 0;
    return RATEWIN_OK;
  });
}

int ratewin_engine_refund(ratewin_engine* engine, uint64_t resource, const ratewin_limit* limit,
                          uint64_t cost, uint64_t* refunded, char** errmsg) {
  return guarded(errmsg, [&] {
    if (engine == nullptr) return fail(errmsg, RATEWIN_EINVAL, "engine is NULL");
    if (limit == nullptr) return fail(errmsg, RATEWIN_EINVAL, "limit is NULL");
    const std::uint64_t given_back = engine->rep.refund(resource, limit->rep, cost);
    if (refunded != nullptr) *refunded = given_back;
    return RATEWIN_OK;
  });
}

void ratewin_stats_init(ratewin_stats* stats) {
  if (stats == nullptr) return;
  *stats = ratewin_stats{};
  stats->size = sizeof *stats;
}

int ratewin_engine_stats(const ratewin_engine* engine, ratewin_stats* stats) {
  return guarded(nullptr, [&] {
    if (engine == nullptr) return RATEWIN_EINVAL;
    if (const int rc = check_out(stats, "stats is NULL", nullptr); rc != 0) return rc;
    const ratewin::Stats s = engine->rep.stats();
    ratewin_stats c{};
    c.size = sizeof c;
    auto* bytes = reinterpret_cast<unsigned char*>(&c);
    for (const CStat& field : kCStats) {
      const ratewin::StatField& f = ratewin::kStatFields[field.index];
      if (f.count != nullptr) {
        const std::uint64_t v = s.*f.count;
        std::memcpy(bytes + field.offset, &v, sizeof v);
      } else if (f.duration != nullptr) {
        const std::int64_t v = (s.*f.duration).count();
        std::memcpy(bytes + field.offset, &v, sizeof v);
      } else {
        const std::int32_t v = (s.*f.flag) ? 1 : 0;
        std::memcpy(bytes + field.offset, &v, sizeof v);
      }
    }
    write_sized(c, stats);
    return RATEWIN_OK;
  });
}

int ratewin_engine_last_error(const ratewin_engine* engine, char** out) {
  return guarded(nullptr, [&] {
    if (engine == nullptr || out == nullptr) return RATEWIN_EINVAL;
    char* copy = copy_string(engine->rep.stats().last_error);
    if (copy == nullptr) return RATEWIN_ENOMEM;
    *out = copy;
    return RATEWIN_OK;
  });
}

int ratewin_engine_capacity(const ratewin_engine* engine, const ratewin_limit* limit,
                            uint64_t* out) {
  return guarded(nullptr, [&] {
    if (engine == nullptr || limit == nullptr || out == nullptr) return RATEWIN_EINVAL;
    *out = engine->rep.capacity(limit->rep);
    return RATEWIN_OK;
  });
}

int ratewin_engine_store_key(const ratewin_engine* engine, uint64_t resource,
                             const ratewin_limit* limit, char** out) {
  return guarded(nullptr, [&] {
    if (engine == nullptr || limit == nullptr || out == nullptr) return RATEWIN_EINVAL;
    char* copy = copy_string(engine->rep.store_key(resource, limit->rep));
    if (copy == nullptr) return RATEWIN_ENOMEM;
    *out = copy;
    return RATEWIN_OK;
  });
}

int ratewin_engine_flush(ratewin_engine* engine, char** errmsg) {
  return guarded(errmsg, [&] {
    if (engine == nullptr) return fail(errmsg, RATEWIN_EINVAL, "engine is NULL");
    if (!engine->rep.flush()) {
      return fail(errmsg, RATEWIN_EUNAVAILABLE,
                  "ratewin_engine_flush: a write failed; its counts are kept for a later flush");
    }
    return RATEWIN_OK;
  });
}

int ratewin_limiter_open(ratewin_engine* engine, uint64_t resource, const ratewin_limit* limit,
                         ratewin_limiter** out, char** errmsg) {
  return guarded(errmsg, [&] {
    if (engine == nullptr) return fail(errmsg, RATEWIN_EINVAL, "engine is NULL");
    if (limit == nullptr) return fail(errmsg, RATEWIN_EINVAL, "limit is NULL");
    if (out == nullptr) return fail(errmsg, RATEWIN_EINVAL, "ratewin_limiter_open: out is NULL");
    *out = new ratewin_limiter{engine->rep.limiter(resource, limit->rep)};
    return RATEWIN_OK;
  });
}

void ratewin_limiter_close(ratewin_limiter* limiter) { delete limiter; }

int ratewin_limiter_try_acquire(ratewin_limiter* limiter, uint64_t cost, ratewin_decision* decision,
                                char** errmsg) {
  return guarded(errmsg, [&] {
    if (const int rc = check_acquire(limiter, "limiter is NULL", decision, errmsg); rc != 0) {
      return rc;
    }
    write_decision(limiter->rep.try_acquire(cost), decision);
    return RATEWIN_OK;
  });
}

uint64_t ratewin_limiter_resource(const ratewin_limiter* limiter) {
  return limiter == nullptr ? 0 : limiter->rep.resource();
}

}  // extern "C"
