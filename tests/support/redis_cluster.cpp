#include "redis_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ratewin::test {
namespace {

using Clock = std::chrono::steady_clock;

// Polls `done` every 50 ms until it is true or `timeout_ms` have passed; its last answer.
template <class F>
bool poll_until(F&& done, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

int run_program(const std::vector<std::string>& argv, std::string& output, int timeout_ms) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    std::vector<std::string> copy = argv;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

RedisCluster::RedisCluster(int primaries, int replicas_each, int node_timeout_ms)
    : RedisCluster(primaries, replicas_each, node_timeout_ms, ServerTls{}) {}

RedisCluster::RedisCluster(int primaries, int replicas_each, int node_timeout_ms,
                           const ServerTls& tls) {
  const int count = primaries * (1 + replicas_each);
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> args = {
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", std::to_string(node_timeout_ms),
        // A replica takes over however long it was cut off from its primary.
        "--cluster-replica-validity-factor", "0",
        // One failed primary takes down its own slots only, not the whole cluster.
        "--cluster-require-full-coverage", "no",
        // A replica's first full sync starts at once, not 5 s later (the default waits for
        // more replicas to share one snapshot).
        "--repl-diskless-sync-delay", "0"};
    if (!tls.cert.empty()) args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
    servers_.push_back(std::make_unique<RedisServer>(std::move(args), "", tls));
  }
  const std::string& cli = server_programs().cli;
  std::vector<std::string> create = {cli, "--cluster", "create"};
  for (const auto& s : servers_) create.push_back("127.0.0.1:" + std::to_string(s->port()));
  create.insert(create.end(),
                {"--cluster-replicas", std::to_string(replicas_each), "--cluster-yes"});
  std::string output;
  if (run_program(create, output, 60'000) != 0) {
    throw std::runtime_error(cli + " --cluster create failed:\n" + output);
  }
  if (!wait_healthy(30'000)) throw std::runtime_error("the cluster did not become healthy");
  // Valkey 8 replicates slot migrations to replicas: one resharded while a replica's full
  // sync runs can leave the replica with a slot migrating or importing for good
  // (valkey-io/valkey#998), and the cli refuses to reshard again. Ready means synced.
  if (!poll_until([&] { return replicas_synced(); }, 30'000))
    throw std::runtime_error("the cluster's replicas did not sync with their primaries");
}

std::string RedisCluster::url() const {
  std::string out = "redis-cluster://";
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (i > 0) out += ',';
    out += "127.0.0.1:" + std::to_string(servers_[i]->port());
  }
  return out;
}

std::string RedisCluster::tls_url() const {
  std::string out = "rediss-cluster://";
  for (std::size_t i = 0; i < servers_.size(); ++i) {
    if (i > 0) out += ',';
    out += "127.0.0.1:" + std::to_string(servers_[i]->tls_port());
  }
  return out;
}

RedisServer* RedisCluster::running_node() {
  for (const auto& s : servers_)
    if (s->running()) return s.get();
  return nullptr;
}

RedisServer* RedisCluster::primary_of(unsigned slot) {
  RedisServer* asked = running_node();
  if (asked == nullptr) return nullptr;
  // CLUSTER SLOTS as text: per range, start, end, then each node's ip, port, id (and
  // hostname info) on lines of their own. Use CLUSTER NODES instead: one line per node.
  for (const std::string& line : lines(asked->command({"CLUSTER", "NODES"}))) {
    // <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <state> <slots...>
    std::istringstream in(line);
    std::string id, address, flags, master, ping, pong, epoch, state;
    in >> id >> address >> flags >> master >> ping >> pong >> epoch >> state;
    if (flags.find("master") == std::string::npos || flags.find("fail") != std::string::npos)
      continue;
    for (std::string range; in >> range;) {
      if (range.starts_with('[')) continue;  // a slot being migrated
      const auto dash = range.find('-');
      const unsigned first = static_cast<unsigned>(std::stoul(range.substr(0, dash)));
      const unsigned last =
          dash == std::string::npos ? first : static_cast<unsigned>(std::stoul(range.substr(dash + 1)));
      if (slot < first || slot > last) continue;
      const int port = std::atoi(address.substr(address.find(':') + 1).c_str());
      for (const auto& s : servers_)
        if (s->port() == port) return s.get();
    }
  }
  return nullptr;
}

std::vector<RedisServer*> RedisCluster::primaries() {
  std::vector<RedisServer*> out;
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    const std::string role = s->command({"ROLE"});
    if (role.starts_with("master")) out.push_back(s.get());
  }
  return out;
}

bool RedisCluster::healthy() {
  bool any = false;
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    any = true;
    const std::string info = s->command({"CLUSTER", "INFO"});
    if (info.find("cluster_state:ok") == std::string::npos ||
        info.find("cluster_slots_ok:16384") == std::string::npos) {
      return false;
    }
  }
  return any;
}

bool RedisCluster::wait_healthy(int timeout_ms) {
  return poll_until([&] { return healthy(); }, timeout_ms);
}

bool RedisCluster::replicas_synced() {
  for (const auto& s : servers_) {
    if (!s->running()) continue;
    const std::string info = s->command({"INFO", "replication"});
    if (info.find("role:slave") != std::string::npos &&
        info.find("master_link_status:up") == std::string::npos) {
      return false;
    }
  }
  return true;
}

std::string RedisCluster::id(RedisServer& server) const {
  std::string out = server.command({"CLUSTER", "MYID"});
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

bool RedisCluster::reshard(RedisServer& from, RedisServer& to, int count) {
  // redis-cli (valkey-cli) refuses to reshard until every node agrees on the configuration
  // (after a previous reshard, gossip takes a moment). And no replica in a full sync (see
  // the constructor).
  const std::string& cli = server_programs().cli;
  const std::string node = "127.0.0.1:" + std::to_string(from.port());
  const bool ready = poll_until(
      [&] {
        last_output_.clear();
        return replicas_synced() &&
               run_program({cli, "--cluster", "check", node}, last_output_, 20'000) == 0 &&
               last_output_.find("[ERR]") == std::string::npos;
      },
      20'000);
  if (!ready) return false;
  last_output_.clear();
  // The deadline only keeps a hung cli from hiding its output behind ctest's timeout: how
  // long a reshard takes is the machine's business. Valkey's waits for the replicas on
  // every slot (CLUSTER SETSLOT): 24 ms a slot on this 2-core machine, 84 ms beside a CPU
  // hog (Redis: 4 ms).
  return run_program({cli, "--cluster", "reshard", node, "--cluster-from", id(from), "--cluster-to",
                      id(to), "--cluster-slots", std::to_string(count), "--cluster-yes",
                      "--cluster-pipeline", "10"},
                     last_output_, 480'000) == 0;
}

}  // namespace ratewin::test
