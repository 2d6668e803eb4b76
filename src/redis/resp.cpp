#include "redis/resp.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace ratewin {
inline namespace v1 {
namespace detail {

class ReplyPool {
 public:
  ReplyPool() = default;
  ReplyPool(const ReplyPool&) = delete;
  ReplyPool& operator=(const ReplyPool&) = delete;
  ~ReplyPool() {
    while (free_ != nullptr) {
      Block* b = free_;
      free_ = b->next_free;
      delete b;
    }
    for (Buffer*& head : buffers_) {
      while (head != nullptr) {
        Buffer* next = head->next;
        std::free(head);
        head = next;
      }
    }
  }

  static redisReplyObjectFunctions functions;

 private:
  static constexpr std::size_t kInline = 48;
  struct Block {
    redisReply reply;  // first: a redisReply* is a Block*
    ReplyPool* pool;
    Block* next_free;
    alignas(void*) char data[kInline];
  };
  // Buffers for what does not fit inline: one free list per size, from 64 bytes to
  // 64 KiB by powers of two; larger ones come from malloc and go back to it.
  struct Buffer {
    Buffer* next;
  };
  static constexpr std::size_t kSizes = 11;
  static constexpr std::size_t kLargest = std::size_t{64} << (kSizes - 1);
  static std::size_t size_class(std::size_t bytes) noexcept {
    const std::size_t rounded = std::bit_ceil(std::max<std::size_t>(bytes, 64));
    return static_cast<std::size_t>(std::countr_zero(rounded)) - 6;  // 64 = 2^6
  }
  void* take_buffer(std::size_t bytes) noexcept {
    if (bytes > kLargest) return std::malloc(bytes);
    const std::size_t c = size_class(bytes);
    if (Buffer* b = buffers_[c]) {
      buffers_[c] = b->next;
      return b;
    }
    return std::malloc(std::size_t{64} << c);
  }
  void give_buffer(void* p, std::size_t bytes) noexcept {
    if (bytes > kLargest) {
      std::free(p);
      return;
    }
    const std::size_t c = size_class(bytes);
    auto* b = static_cast<Buffer*>(p);
    b->next = buffers_[c];
    buffers_[c] = b;
  }

  // A reply block of `type`, not yet linked to its parent; nullptr when out of memory
  // (hiredis then fails the reader). No exception may cross hiredis' C frames.
  static redisReply* make(const redisReadTask* task, int type) noexcept {
    auto* pool = static_cast<ReplyPool*>(task->privdata);
    Block* b = pool->free_;
    if (b != nullptr) {
      pool->free_ = b->next_free;
    } else {
      b = new (std::nothrow) Block;
      if (b == nullptr) return nullptr;
      b->pool = pool;
    }
    b->reply = redisReply{};
    b->reply.type = type;
    return &b->reply;
  }
  // Hands a complete reply to its parent (if any): from then on the parent frees it.
  static redisReply* link(const redisReadTask* task, redisReply* r) noexcept {
    if (task->parent != nullptr) {
      static_cast<redisReply*>(task->parent->obj)->element[task->idx] = r;
    }
    return r;
  }
  // Returns a block that could not be completed to the free list.
  static void* give_up(redisReply* r) noexcept {
    Block* b = reinterpret_cast<Block*>(r);
    b->next_free = b->pool->free_;
    b->pool->free_ = b;
    return nullptr;
  }
  static void* create_string(const redisReadTask* task, char* str, std::size_t len) {
    redisReply* r = make(task, task->type);
    if (r == nullptr) return nullptr;
    Block* b = reinterpret_cast<Block*>(r);
    char* buf = len < kInline ? b->data : static_cast<char*>(b->pool->take_buffer(len + 1));
    if (buf == nullptr) return give_up(r);
    std::memcpy(buf, str, len);
    buf[len] = '\0';
    r->str = buf;
    r->len = len;
    return link(task, r);
  }
  static void* create_array(const redisReadTask* task, int elements) {
    redisReply* r = make(task, REDIS_REPLY_ARRAY);
    if (r == nullptr) return nullptr;
    Block* b = reinterpret_cast<Block*>(r);
    const auto n = static_cast<std::size_t>(elements > 0 ? elements : 0);
    if (n > 0) {
      r->element = n * sizeof(redisReply*) <= kInline
                       ? reinterpret_cast<redisReply**>(b->data)
                       : static_cast<redisReply**>(b->pool->take_buffer(n * sizeof(redisReply*)));
      if (r->element == nullptr) return give_up(r);
      std::fill_n(r->element, n, nullptr);
    }
    r->elements = n;
    return link(task, r);
  }
  static void* create_integer(const redisReadTask* task, long long value) {
    redisReply* r = make(task, REDIS_REPLY_INTEGER);
    if (r == nullptr) return nullptr;
    r->integer = value;
    return link(task, r);
  }
  static void* create_nil(const redisReadTask* task) {
    redisReply* r = make(task, REDIS_REPLY_NIL);
    return r == nullptr ? nullptr : link(task, r);
  }

 public:
  static void free_object(void* object) {
    auto* r = static_cast<redisReply*>(object);
    if (r == nullptr) return;
    Block* b = reinterpret_cast<Block*>(r);
    ReplyPool* pool = b->pool;
    if (r->type == REDIS_REPLY_ARRAY && r->element != nullptr) {
      for (std::size_t i = 0; i < r->elements; ++i) free_object(r->element[i]);
      if (reinterpret_cast<char*>(r->element) != b->data)
        pool->give_buffer(r->element, r->elements * sizeof(redisReply*));
    } else if (r->str != nullptr && r->str != b->data) {
      pool->give_buffer(r->str, r->len + 1);
    }
    b->next_free = pool->free_;
    pool->free_ = b;
  }

 private:
  Block* free_ = nullptr;
  std::array<Buffer*, kSizes> buffers_{};
};

redisReplyObjectFunctions ReplyPool::functions = {
    &ReplyPool::create_string, &ReplyPool::create_array, &ReplyPool::create_integer,
    &ReplyPool::create_nil, &ReplyPool::free_object};

void RespWriter::check_complete() const {
  if (missing_ != 0) {
    throw std::logic_error("a RESP command written with " +
                           std::string(missing_ > 0 ? "fewer" : "more") +
                           " arguments than it declared");
  }
}

RespReader::RespReader()
    : pool_(std::make_unique<ReplyPool>()),
      reader_(redisReaderCreateWithFunctions(&ReplyPool::functions)) {
  if (reader_ == nullptr) throw std::bad_alloc();
  reader_->privdata = pool_.get();
}

RespReader::~RespReader() {
  release(last_);
  redisReaderFree(reader_);  // (frees a reply half made with the pool's functions)
}

Status RespReader::feed(const char* data, std::size_t size) {
  if (redisReaderFeed(reader_, data, size) != REDIS_OK)
    return Status(Status::Code::protocol, reader_->errstr);
  return {};
}

Status RespReader::next(redisReply*& out) {
  release(last_);
  last_ = nullptr;
  void* reply = nullptr;
  if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
    out = nullptr;
    return Status(Status::Code::protocol,
                  std::string("a reply that is not RESP: ") + reader_->errstr);
  }
  out = last_ = static_cast<redisReply*>(reply);
  return {};
}

void RespReader::release(redisReply* reply) noexcept {
  if (reply == nullptr) return;
  if (reply == last_) last_ = nullptr;
  ReplyPool::free_object(reply);
}

void RespReader::reset() {
  release(last_);
  last_ = nullptr;
  redisReader* fresh = redisReaderCreateWithFunctions(&ReplyPool::functions);
  if (fresh == nullptr) throw std::bad_alloc();
  fresh->privdata = pool_.get();
  redisReaderFree(reader_);
  reader_ = fresh;
}

std::string reply_text(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR || reply.type == REDIS_REPLY_STATUS ||
      reply.type == REDIS_REPLY_STRING) {
    return std::string(reply.str, reply.len);
  }
  if (reply.type == REDIS_REPLY_INTEGER) return std::to_string(reply.integer);
  if (reply.type == REDIS_REPLY_NIL) return "(nil)";
  return "(array of " + std::to_string(reply.elements) + ")";
}

Status status_of(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ERROR) return {};
  return Status::of_error_reply(std::string_view(reply.str, reply.len));
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
