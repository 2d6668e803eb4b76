// An admitted request's write to Redis allocates nothing once it is in steady state: its
// commands are written once into buffers the thread and the connection keep, sent as they
// are, and their replies parsed into recycled objects. Counted by replacing operator new
// and malloc in this test binary (so the C library's allocations, hiredis' parser among
// them, count too), on the deciding thread only: the store's own thread (boundary reads,
// heartbeats) may allocate meanwhile. Over TLS, OpenSSL's own per-record allocations
// are bounded instead.
#include <doctest/doctest.h>

#include <cstdlib>
#include <new>
#include <string>

#include "ratewin/engine.h"
#include "certificates.h"
#include "redis_server.h"

namespace {

thread_local bool counting = false;
thread_local std::size_t allocations = 0;

void note() noexcept {
  if (counting) ++allocations;
}

}  // namespace

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* pointer, std::size_t size);
void __libc_free(void* pointer);

void* malloc(std::size_t size) {
  note();
  return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) {
  note();
  return __libc_calloc(count, size);
}
void* realloc(void* pointer, std::size_t size) {
  note();
  return __libc_realloc(pointer, size);
}
void free(void* pointer) { __libc_free(pointer); }
}

void* operator new(std::size_t size) {
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace ratewin::test {

using namespace std::chrono_literals;

TEST_CASE("an admitted write to Redis allocates nothing in steady state, over TCP and TLS") {
  // The counter sees what it must: a C++ allocation and a C one.
  counting = true;
  allocations = 0;
  {
    std::string text(100, 'x');
    void* block = std::malloc(10);
    std::free(block);
  }
  counting = false;
  REQUIRE(allocations == 2);

  bool tls = false;
  SUBCASE("plain TCP") {}
  SUBCASE("TLS") { tls = true; }
  const Served served = serve(tls);
  Options options;
  options.redis = served.url();
  options.logger = [](LogLevel, std::string_view) {};
  Engine engine(options);
  const Limit limits[] = {
      Limit(Limit::kMaxCount, 60s, 5s),  // never full: every call is admitted and written
      Limit(Limit::kMaxCount, 60s).with_algorithm(Algorithm::token_bucket),
      Limit(4096, 1s).with_algorithm(Algorithm::sliding_log),
  };
  for (const Limit& limit : limits) {
    CAPTURE(limit.to_string());
    // Warm up: the limiter made, the connection open, every buffer grown.
    for (int i = 0; i < 2000; ++i) REQUIRE(engine.try_acquire("hot", limit).allowed);
    const std::uint64_t written = engine.stats().writes_ok;
    std::size_t admitted = 0;
    counting = true;
    allocations = 0;
    for (int i = 0; i < 500; ++i) admitted += engine.try_acquire("hot", limit).allowed ? 1 : 0;
    counting = false;
    const std::size_t counted = allocations;
    CHECK(admitted == 500);
    CHECK(engine.stats().writes_ok - written == 500);  // each one a write, in Redis
    if (!tls) {
      CHECK(counted == 0);
    } else {
      // Ours allocate nothing here either; OpenSSL 3.0 allocates and frees a few
      // temporaries for each record it encrypts or decrypts (a write and its reply: 4).
      MESSAGE("over TLS, OpenSSL's allocations per admitted write: " << counted / 500.0);
      CHECK(counted <= 500 * 4);
    }
  }
}

}  // namespace ratewin::test
