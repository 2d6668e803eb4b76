#include "redis/topology.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "redis/resp.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

bool is_int(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_INTEGER; }
bool is_string(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

}  // namespace

RedisNode::RedisNode(std::uint16_t index, RedisEndpoint endpoint, const Options& options,
                     Reporter& reporter, std::atomic<int>& open_circuits,
                     std::function<void(RedisNode&)> opened)
    : index_(index),
      endpoint_(std::move(endpoint)),
      name_(endpoint_.unix_path.empty() ? host_port(endpoint_.host, endpoint_.port)
                                        : endpoint_.unix_path),
      pool_(endpoint_, options.connect_timeout, options.command_timeout, options.max_connections),
      circuit_(reporter, endpoint_.describe(), open_circuits,
               [this, opened = std::move(opened)] {
                 if (opened) opened(*this);
               }) {}

Topology::Topology(RedisAddress address, const Options& options, Reporter& reporter,
                   std::function<void(RedisNode&)> opened)
    : address_(std::move(address)),
      options_(options),
      reporter_(reporter),
      opened_(std::move(opened)),
      single_(address_.kind != RedisAddress::Kind::kCluster) {
  served_[0].store(kClusterSlots, std::memory_order_relaxed);  // slots_ start at node 0
  // Outside a cluster: the server (or, under Sentinel, the first primary found) is node
  // 0 and serves every slot. In a cluster the seeds are nodes 0.. and node 0 serves every
  // slot until the map is read.
  if (address_.kind == RedisAddress::Kind::kSingle) {
    std::lock_guard lock(mutex_);
    owned_.push_back(std::make_unique<RedisNode>(0, address_.login, options_, reporter_,
                                                 open_circuits_, opened_));
    nodes_[0].store(owned_.back().get(), std::memory_order_release);
    size_.store(1, std::memory_order_release);
  } else if (address_.kind == RedisAddress::Kind::kCluster) {
    for (const RedisEndpoint& seed : address_.servers) node_at(seed.host, seed.port);
  } else {
    // Under Sentinel, node 0 stands for "no primary known": it serves every slot until
    // one is found, and nothing ever connects to it.
    RedisEndpoint nowhere = address_.login;
    nowhere.host = "(no primary known)";
    nowhere.port = 0;
    std::lock_guard lock(mutex_);
    owned_.push_back(
        std::make_unique<RedisNode>(0, nowhere, options_, reporter_, open_circuits_, opened_));
    nodes_[0].store(owned_.back().get(), std::memory_order_release);
    size_.store(1, std::memory_order_release);
  }
}

RedisNode* Topology::node_at(const std::string& host, int port) {
  std::lock_guard lock(mutex_);
  for (const auto& node : owned_) {
    if (node->endpoint().host == host && node->endpoint().port == port) return node.get();
  }
  if (owned_.size() == kMaxNodes) return nullptr;
  const auto index = static_cast<std::uint16_t>(owned_.size());
  owned_.push_back(std::make_unique<RedisNode>(index, address_.node(host, port), options_,
                                               reporter_, open_circuits_, opened_));
  nodes_[index].store(owned_.back().get(), std::memory_order_release);
  size_.store(owned_.size(), std::memory_order_release);
  return owned_.back().get();
}

void Topology::assign(std::uint16_t first, std::uint16_t last, RedisNode& node) {
  for (std::uint32_t s = first; s <= last && s < kClusterSlots; ++s) {
    const std::uint16_t before = slots_[s].exchange(node.index(), std::memory_order_acq_rel);
    if (before != node.index()) {
      served_[node.index()].fetch_add(1, std::memory_order_acq_rel);
      served_[before].fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

Status Topology::apply_cluster_slots(const redisReply& reply, const std::string& asked_host) {
  const auto failed = [](std::string why) {
    return Status(Status::Code::protocol, "CLUSTER SLOTS: " + std::move(why));
  };
  if (reply.type == REDIS_REPLY_ERROR) return status_of(reply);
  if (reply.type != REDIS_REPLY_ARRAY) {
    return failed("unexpected reply");
  }
  // Checked whole before anything changes.
  struct Range {
    std::uint16_t first, last;
    std::string host;
    int port;
  };
  std::vector<Range> ranges;
  std::vector<bool> covered(kClusterSlots, false);
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply* e = reply.element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !is_int(e->element[0]) ||
        !is_int(e->element[1]) || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 || !is_string(e->element[2]->element[0]) ||
        !is_int(e->element[2]->element[1])) {
      return failed("malformed entry");
    }
    const long long first = e->element[0]->integer;
    const long long last = e->element[1]->integer;
    if (first < 0 || last < first || last >= kClusterSlots) {
      return failed("bad slot range");
    }
    std::string host(e->element[2]->element[0]->str, e->element[2]->element[0]->len);
    if (host.empty()) host = asked_host;  // "the address you reached me at"
    if (host == "?") {
      return failed("a primary's address is unknown");
    }
    ranges.push_back({static_cast<std::uint16_t>(first), static_cast<std::uint16_t>(last),
                      std::move(host), static_cast<int>(e->element[2]->element[1]->integer)});
    for (long long s = first; s <= last; ++s) covered[static_cast<std::size_t>(s)] = true;
  }
  for (std::uint32_t s = 0; s < kClusterSlots; ++s) {
    if (!covered[s]) {
      return failed("slot " + std::to_string(s) + " has no primary (cluster down?)");
    }
  }
  for (const Range& r : ranges) {
    RedisNode* node = node_at(r.host, r.port);
    if (node == nullptr) {
      return failed("more than " + std::to_string(kMaxNodes) + " nodes");
    }
    assign(r.first, r.last, *node);
  }
  return {};
}

Topology::Redirect Topology::redirect(const redisReply& reply, const RedisNode& from) {
  if (reply.type != REDIS_REPLY_ERROR) return {};
  const std::string_view text(reply.str, reply.len);
  const bool ask = text.starts_with("ASK ");
  if (!ask && !text.starts_with("MOVED ")) return {};
  // "MOVED <slot> <host>:<port>"
  const std::size_t space = text.find(' ', ask ? 4 : 6);
  if (space == std::string_view::npos) return {};
  const std::string_view slot_text = text.substr(ask ? 4 : 6, space - (ask ? 4 : 6));
  const std::string_view where = text.substr(space + 1);
  const std::size_t colon = where.rfind(':');
  unsigned slot = 0;
  int port = 0;
  if (colon == std::string_view::npos ||
      std::from_chars(slot_text.data(), slot_text.data() + slot_text.size(), slot).ec !=
          std::errc() ||
      slot >= kClusterSlots ||
      std::from_chars(where.data() + colon + 1, where.data() + where.size(), port).ec !=
          std::errc()) {
    return {};
  }
  std::string host(where.substr(0, colon));
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  if (host.empty()) host = from.endpoint().host;
  RedisNode* node = node_at(host, port);
  if (node == nullptr) return {};
  if (!ask) {
    assign(static_cast<std::uint16_t>(slot), static_cast<std::uint16_t>(slot), *node);
    want_refresh();  // one slot moved: others likely did too
  }
  return {node, ask};
}

void Topology::retire_unused() {
  for (std::size_t i = 0; i < size(); ++i)
    if (!serves(i) && !node(i).circuit().available()) node(i).circuit().retire();
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
