// The Redis store's writes from an application's event loop (Store::async_writer).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/store.h"
#include "redis/async.h"
#include "redis/resp.h"
#include "redis/write_path.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// WritePath's writes, made from a libuv loop without blocking it: the same commands,
// written once into the batch's RESP (WritePath::plan), to the same nodes, sent as they
// are on asynchronous connections of this loop's own, one per node, made when first
// needed. Commands written in one turn of the loop go out together; each reply is routed
// as WritePath routes it (WritePath::route: MOVED, ASK, NOSCRIPT, a server that cannot
// serve), and a batch completes once every command has its final reply, or failed. A
// connection that stays silent for the command timeout is dropped (AsyncRedis), which
// fails its commands; a network failure, or a server that cannot serve, opens the node's
// circuit, as WritePath does (the store's probes close it). A write whose node has no
// connection ready on this loop yet (just made, or reconnecting) is made synchronously by
// WritePath instead.
//
// Threads: the loop's thread only.
class AsyncWritePath final : public AsyncWriter {
 public:
  AsyncWritePath(uv_loop_t* loop, const Options& options, WritePath& path,
                 const StoreLayout& layout, Topology& topology, Reporter& reporter)
      : loop_(loop),
        options_(options),
        path_(path),
        layout_(layout),
        topology_(topology),
        reporter_(reporter) {}
  ~AsyncWritePath() override;

  void add_all(std::span<const StoreWrite> writes, std::span<const std::span<std::uint64_t>> counts,
               std::span<bool> written, std::function<void()> done) override;
  void remove(const StoreWrite& give_back) override;
  void close() override;

 private:
  // One add_all call (or give-back): its commands in RESP, each on its way to the node of
  // its slot.
  struct Batch {
    struct Item {
      Batch* batch;
      CommandState state;
    };
    std::span<const StoreWrite> writes;
    std::span<const std::span<std::uint64_t>> counts;
    std::span<bool> written;
    std::function<void()> done;
    StoreWrite give_back;  // a give-back's (its writes span points here)
    RespWriter resp;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> commands_of;  // per write: first, n
    std::vector<WriteReplies> replies;
    std::vector<Item> items;
    std::size_t open = 0;  // items without their final reply
    Status failure;        // the first failure
    std::int64_t started = 0;
    bool removing = false;  // a give-back: its replies may call for a correction
    std::list<Batch>::iterator self;
    AsyncWritePath* path;
  };
  // A batch from the spare list (kept for its buffers), linked in batches_.
  Batch& new_batch();
  // This loop's connection to `node`, connecting if new; nullptr once closed.
  AsyncRedis* connection(RedisNode& node);
  // Sends (or sends again, after a redirection) a batch's command.
  void send(Batch& batch, std::size_t index);
  // A reply (or null: the command failed) to a batch's command (`context` is its item).
  static void on_reply(const redisReply* reply, void* context);
  void take(Batch& batch, std::size_t index, const redisReply* reply);
  void settle(Batch& batch, std::size_t index, CommandEnd end);
  void finish(Batch& batch);
  // Sends the commands of `resp` to `node`, without waiting for their replies (a
  // correction): on a connection of this loop's, or, if there is none yet, on a blocking
  // one of the node's pool.
  void fire(RedisNode& node, const RespWriter& resp);

  uv_loop_t* loop_;
  const Options& options_;
  WritePath& path_;
  const StoreLayout& layout_;
  Topology& topology_;
  Reporter& reporter_;
  struct Link {
    RedisNode* node;
    std::unique_ptr<AsyncRedis> redis;
  };
  std::vector<Link> links_;
  std::list<Batch> batches_;
  std::list<Batch> spare_;  // finished batches, kept for their buffers
  RespWriter repair_;       // corrections, as they are sent
  bool closed_ = false;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
