#include "core/record_pool.h"

#include <algorithm>
#include <cassert>
#include <new>

#include <sys/mman.h>
#include <unistd.h>

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

RecordId load_link(const std::byte* p) {
  return std::atomic_ref<RecordId>(*reinterpret_cast<RecordId*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_relaxed);
}

void store_link(std::byte* p, RecordId id) {
  std::atomic_ref<RecordId>(*reinterpret_cast<RecordId*>(p)).store(id, std::memory_order_relaxed);
}

}  // namespace

RecordPool::~RecordPool() {
  for (const Chunk& c : chunks_) ::munmap(c.base, c.bytes);
}

RecordPool::SizeClass& RecordPool::size_class(std::size_t stride) {
  for (auto& c : classes_) {
    if (c.stride == stride) return c;
  }
  SizeClass& c = classes_.emplace_back();
  c.stride = stride;
  c.chunk_blocks = 16;
  return c;
}

std::byte* RecordPool::add_chunk(std::size_t bytes) {
  if (chunks_.size() == kMaxChunks) throw std::bad_alloc();
  // Room first, geometrically, so that push_back below cannot throw after the mapping.
  if (chunks_.size() == chunks_.capacity())
    chunks_.reserve(std::max<std::size_t>(16, 2 * chunks_.size()));
  Directory* dir = directory_.load(std::memory_order_relaxed);
  if (dir == nullptr || dir->count.load(std::memory_order_relaxed) == dir->capacity) {
    // Readers may be using the current directory: publish a larger copy, keep the old.
    auto grown = std::make_unique<Directory>();
    grown->capacity = dir == nullptr ? 16 : dir->capacity * 2;
    grown->chunks = std::make_unique<std::byte*[]>(grown->capacity);
    const std::size_t count = dir == nullptr ? 0 : dir->count.load(std::memory_order_relaxed);
    if (dir != nullptr) std::copy_n(dir->chunks.get(), count, grown->chunks.get());
    grown->count.store(count, std::memory_order_relaxed);
    dir = grown.get();
    directories_.push_back(std::move(grown));
    directory_.store(dir, std::memory_order_release);
  }
  // Zeroed, so a reader that races with the first use of a block reads zeros, never
  // indeterminate bytes; pages not used yet cost no memory.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::byte*>(p);
  chunks_.push_back({base, bytes});
  const std::size_t index = dir->count.load(std::memory_order_relaxed);
  dir->chunks[index] = base;
  dir->count.store(index + 1, std::memory_order_release);
  return base;
}

RecordId RecordPool::allocate(std::size_t bytes) {
  assert(bytes % 8 == 0 && bytes >= link_offset_ + sizeof(RecordId));
  SizeClass& c = size_class(bytes);
  if (c.free != kNoRecord) {
    const RecordId id = c.free;
    c.free = load_link(address(id) + link_offset_);
    return id;
  }
  if (c.left == 0) {
    // Chunks grow geometrically up to 64 KiB, so a pool that holds few records stays
    // small. A block larger than 64 KiB gets a chunk of its own (offset 0).
    // Whole pages: as many blocks as the pages hold.
    static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::size_t blocks = std::max<std::size_t>(1, std::min(c.chunk_blocks, kChunkBytes / bytes));
    const std::size_t mapped = (blocks * bytes + page - 1) / page * page;
    blocks = std::min(mapped, std::max(kChunkBytes, bytes)) / bytes;
    c.chunk_blocks *= 2;
    add_chunk(mapped);
    c.next = static_cast<RecordId>((chunks_.size() - 1) << kOffsetBits);
    c.left = blocks;
  }
  const RecordId id = c.next;
  --c.left;
  c.next += static_cast<RecordId>(bytes / 8);
  return id;
}

void RecordPool::deallocate(RecordId id, std::size_t bytes) noexcept {
  SizeClass& c = size_class(bytes);  // exists: the block came from allocate(bytes)
  store_link(address(id) + link_offset_, c.free);
  c.free = id;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
