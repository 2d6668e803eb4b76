// Allocation of limiter records without per-allocation overhead, addressed by 32-bit ids.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ratewin {
inline namespace v1 {
namespace detail {

using RecordId = std::uint32_t;
inline constexpr RecordId kNoRecord = 0xffffffffU;

// Hands out blocks of a few fixed sizes (one per window geometry in use), carved from
// chunks of at most 64 KiB mapped from the system (zeroed, and resident only once
// touched), with a free list per size. A block is named by a
// 32-bit id (chunk index, offset / 8), so table slots and LRU links stay small.
//
// Lock-free readers may read any block at any time (see Shard): chunks are never freed
// or moved while the pool lives, a block always keeps its size, and a block's free-list
// link is stored at `link_offset`, which readers never read. The chunk directory is
// replaced, never reallocated in place, when it grows; old copies live until the pool
// dies. allocate/deallocate are not thread-safe: a shard calls them under its lock.
class RecordPool {
 public:
  explicit RecordPool(std::size_t link_offset) noexcept : link_offset_(link_offset) {}
  ~RecordPool();
  RecordPool(const RecordPool&) = delete;
  RecordPool& operator=(const RecordPool&) = delete;

  // Storage for `bytes` (a multiple of 8, more than link_offset + 4), 8-byte aligned.
  // Throws std::bad_alloc.
  RecordId allocate(std::size_t bytes);
  // Returns storage obtained from allocate() with the same `bytes`.
  void deallocate(RecordId id, std::size_t bytes) noexcept;

  // The block of a valid id (under the lock).
  std::byte* address(RecordId id) const noexcept {
    const Directory* dir = directory_.load(std::memory_order_relaxed);
    return dir->chunks[id >> kOffsetBits] + std::size_t{id & kOffsetMask} * 8;
  }
  // The block of an id a lock-free reader saw, or nullptr if its chunk is not visible
  // to this reader yet.
  std::byte* address_racy(RecordId id) const noexcept {
    const Directory* dir = directory_.load(std::memory_order_acquire);
    const std::size_t chunk = id >> kOffsetBits;
    if (chunk >= dir->count.load(std::memory_order_acquire)) return nullptr;
    return dir->chunks[chunk] + std::size_t{id & kOffsetMask} * 8;
  }

 private:
  static constexpr unsigned kOffsetBits = 13;  // 8-byte units within a 64 KiB chunk
  static constexpr std::uint32_t kOffsetMask = (1U << kOffsetBits) - 1;
  static constexpr std::size_t kChunkBytes = std::size_t{8} << kOffsetBits;
  static constexpr std::size_t kMaxChunks = std::size_t{1} << (32 - kOffsetBits);

  struct Directory {
    std::atomic<std::size_t> count{0};
    std::size_t capacity = 0;
    std::unique_ptr<std::byte*[]> chunks;
  };
  struct SizeClass {
    std::size_t stride = 0;
    RecordId free = kNoRecord;
    RecordId next = kNoRecord;  // bump position in the newest chunk of this class
    std::size_t left = 0;       // blocks left after `next` in that chunk
    std::size_t chunk_blocks = 0;
  };

  SizeClass& size_class(std::size_t stride);
  std::byte* add_chunk(std::size_t bytes);

  std::size_t link_offset_;
  std::vector<SizeClass> classes_;
  struct Chunk {
    std::byte* base;
    std::size_t bytes;
  };
  std::vector<Chunk> chunks_;                            // owned mappings
  std::vector<std::unique_ptr<Directory>> directories_;  // the current one is last
  std::atomic<Directory*> directory_{nullptr};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
