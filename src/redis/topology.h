// Which Redis primary serves which hash slot, and each primary's connections and circuit.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ratewin/engine.h"
#include "redis/circuit.h"
#include "redis/endpoint.h"
#include "redis/pool.h"
#include "redis/reporter.h"
#include "redis/slot.h"
#include "redis/status.h"

struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

// One Redis primary (or the one server outside a cluster): its address, the blocking
// connections the application threads write on, and its circuit breaker. Failure handling
// is per node: a node that fails makes only the resources of its own slots degraded.
class RedisNode {
 public:
  RedisNode(std::uint16_t index, RedisEndpoint endpoint, const Options& options,
            Reporter& reporter, std::atomic<int>& open_circuits,
            std::function<void(RedisNode&)> opened);

  std::uint16_t index() const noexcept { return index_; }
  const RedisEndpoint& endpoint() const noexcept { return endpoint_; }
  // "host:port", as Redis names nodes in MOVED and CLUSTER SLOTS.
  const std::string& name() const noexcept { return name_; }
  RedisPool& pool() noexcept { return pool_; }
  CircuitBreaker& circuit() noexcept { return circuit_; }
  const CircuitBreaker& circuit() const noexcept { return circuit_; }

 private:
  const std::uint16_t index_;
  const RedisEndpoint endpoint_;
  const std::string name_;
  RedisPool pool_;
  CircuitBreaker circuit_;
};

// The nodes this store knows and the slot map. Outside a cluster there is one node and
// every slot is its own; under Sentinel, the slots move to whichever node is the primary.
// Nodes are added (by address, once) and never removed, so a RedisNode& stays valid for
// the store's life.
//
// Threads: any thread reads the map and the nodes and may apply a MOVED; the loop thread
// refreshes the whole map.
class Topology {
 public:
  static constexpr std::size_t kMaxNodes = 4096;

  // `opened(node)` runs when a node's circuit opens (from the thread that opened it).
  Topology(RedisAddress address, const Options& options, Reporter& reporter,
           std::function<void(RedisNode&)> opened);

  const RedisAddress& address() const noexcept { return address_; }
  bool cluster() const noexcept { return address_.kind == RedisAddress::Kind::kCluster; }
  bool sentinel() const noexcept { return address_.kind == RedisAddress::Kind::kSentinel; }
  // Under Sentinel, node 0 is no server: it serves the slots while no primary is known
  // (its circuit open).
  bool placeholder(const RedisNode& node) const noexcept {
    return sentinel() && node.index() == 0;
  }

  RedisNode& node_for_slot(std::uint16_t slot) const noexcept {
    return *nodes_[slots_[slot].load(std::memory_order_acquire)].load(std::memory_order_acquire);
  }
  RedisNode& node_for_resource(std::uint64_t resource) const noexcept {
    return node_for_slot(single_ ? 0 : resource_slot(resource));
  }
  // The node at `index` (< size()).
  RedisNode& node(std::size_t index) const noexcept {
    return *nodes_[index].load(std::memory_order_acquire);
  }
  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  // Whether node `index` serves any slot now.
  bool serves(std::size_t index) const noexcept {
    return served_[index].load(std::memory_order_acquire) > 0;
  }

  // Whether the circuit of every node that serves slots is closed: decisions then need
  // not look up their node.
  bool all_available() const noexcept {
    return open_circuits_.load(std::memory_order_acquire) == 0;
  }

  // The node at host:port (added, with its circuit closed, if new). nullptr when
  // kMaxNodes are known already.
  RedisNode* node_at(const std::string& host, int port);
  // Slots first..last are served by `node` from now on.
  void assign(std::uint16_t first, std::uint16_t last, RedisNode& node);

  // Takes in a CLUSTER SLOTS reply, from a node reached at `asked_host` (which stands for
  // an empty or unknown address in the reply). A failure if the reply is not one, or
  // leaves slots unserved (the map keeps them where they were).
  Status apply_cluster_slots(const redisReply& reply, const std::string& asked_host);
  // Takes in a redirection ("MOVED <slot> <host>:<port>" moves the slot in the map; "ASK
  // ..." does not). The node it names, or nullptr if `reply` is not a redirection.
  struct Redirect {
    RedisNode* node = nullptr;
    bool ask = false;
  };
  // `from` answered it (an empty host means its host).
  Redirect redirect(const redisReply& reply, const RedisNode& from);

  // Asks the loop to read the slot map again (a MOVED, a lost node), at most every
  // 100 ms; take_refresh() says whether it was asked for since the last call.
  void want_refresh() noexcept { refresh_.store(true, std::memory_order_release); }
  bool take_refresh() noexcept { return refresh_.exchange(false, std::memory_order_acq_rel); }

  // A node that serves no slots any more (a failed primary, replaced) and whose circuit
  // is open: it no longer counts against all_available(). Loop thread.
  void retire_unused();

 private:
  const RedisAddress address_;
  const Options& options_;
  Reporter& reporter_;
  const std::function<void(RedisNode&)> opened_;
  const bool single_;
  std::mutex mutex_;  // guards adding nodes and owned_
  std::vector<std::unique_ptr<RedisNode>> owned_;
  std::array<std::atomic<RedisNode*>, kMaxNodes> nodes_{};
  std::atomic<std::size_t> size_{0};
  std::array<std::atomic<std::uint16_t>, kClusterSlots> slots_{};
  std::array<std::atomic<std::uint32_t>, kMaxNodes> served_{};  // slots per node
  std::atomic<int> open_circuits_{0};
  std::atomic<bool> refresh_{false};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
