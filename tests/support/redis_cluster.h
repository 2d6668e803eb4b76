// A private Redis Cluster for a test or a benchmark: redis-server x (primaries x (1 +
// replicas)) on free loopback ports, joined with `redis-cli --cluster create`, stopped by
// PID; valkey-server and valkey-cli instead with RATEWIN_TEST_REDIS=valkey
// (server_programs()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "redis_server.h"

namespace ratewin::test {

class RedisCluster {
 public:
  // Starts the servers (cluster-enabled, with a short node timeout so that a failover
  // takes a second or two) and creates the cluster; returns once every node agrees that
  // all 16384 slots are served and every replica has synced. Throws std::runtime_error if
  // it cannot.
  RedisCluster(int primaries, int replicas_each, int node_timeout_ms = 1000);
  // The same with TLS (`tls` for every node): clients, the cluster bus and replication
  // over TLS (tls-cluster, tls-replication); the cli and the helper's own commands use
  // the plain ports, which stay open.
  RedisCluster(int primaries, int replicas_each, int node_timeout_ms, const ServerTls& tls);

  std::size_t size() const { return servers_.size(); }
  RedisServer& server(std::size_t i) { return *servers_[i]; }
  // redis-cluster://127.0.0.1:<port of server 0>[,...]: every node as a seed.
  std::string url() const;
  // rediss-cluster://127.0.0.1:<TLS port of server 0>[,...], for a cluster with TLS.
  std::string tls_url() const;
  // The server that serves `slot` now as its primary (per CLUSTER SLOTS, asked of a
  // running node), or nullptr.
  RedisServer* primary_of(unsigned slot);
  std::vector<RedisServer*> primaries();
  // Whether every running node says cluster_state:ok and agrees on the primaries.
  bool healthy();
  // Waits up to `timeout_ms` for healthy().
  bool wait_healthy(int timeout_ms);
  // Whether every running replica's link to its primary is up (INFO replication): no
  // full sync under way.
  bool replicas_synced();
  // `redis-cli --cluster reshard` (server_programs().cli): moves `count` slots from the
  // primary `from` to `to`. True if the cli succeeded.
  bool reshard(RedisServer& from, RedisServer& to, int count);
  // What the last cli run printed.
  const std::string& last_output() const { return last_output_; }
  // Node ID (CLUSTER MYID).
  std::string id(RedisServer& server) const;

 private:
  RedisServer* running_node();
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::string last_output_;
};

// Runs a program (argv[0] from PATH) and waits for it; its exit status (-1 if it could not
// run), with what it printed in `output`. Killed after `timeout_ms`.
int run_program(const std::vector<std::string>& argv, std::string& output, int timeout_ms);

}  // namespace ratewin::test
