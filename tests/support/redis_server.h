// A private redis-server (or valkey-server) for a test or a benchmark: started on a free
// loopback port, stopped by PID.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ratewin::test {

// The server the tests and benchmarks run against, chosen by the environment variable
// RATEWIN_TEST_REDIS. It is read here and nowhere else in the C++ kit (and the C helper,
// redis_server_c.h, is this kit); tests/support's Python kit reads the same variable with
// the same values:
//   unset, empty or "redis"  redis-server and redis-cli (the default)
//   "valkey"                 valkey-server and valkey-cli
// Sentinel is `<server> --sentinel` either way. Any other value throws std::runtime_error
// that names the variable, its value and the values it takes.
struct ServerPrograms {
  std::string name;    // "redis" or "valkey"
  std::string server;  // "redis-server" or "valkey-server", run from PATH
  std::string cli;     // "redis-cli" or "valkey-cli", run from PATH
};
const ServerPrograms& server_programs();

// TLS for a test server (see Certificates): its certificate and key, the CA it trusts for
// client certificates, and whether it requires one (mutual TLS).
struct ServerTls {
  std::string cert;
  std::string key;
  std::string ca;
  bool auth_clients = false;
};

// Starts server_programs().server (redis-server or valkey-server, from PATH) as a child
// process, with no persistence, bound to 127.0.0.1 on a port the kernel reported free (and
// a Unix socket in a private directory), and waits until it answers PING. The first server
// a process starts must say in INFO server that it is the one RATEWIN_TEST_REDIS names.
// Never touches a system service: it ends only the process it started. Throws
// std::runtime_error if it cannot start one.
class RedisServer {
 public:
  // `config`, if given, is written to a file that the server reads first (Sentinel needs
  // one, and rewrites it).
  explicit RedisServer(std::vector<std::string> extra_args = {}, const std::string& config = "");
  // The same, also serving TLS on a second port (tls_port()); the plain port stays, for
  // the helper's own commands and redis-cli (valkey-cli).
  RedisServer(std::vector<std::string> extra_args, const std::string& config, const ServerTls& tls);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string socket_path() const { return (dir_ / "redis.sock").string(); }
  int tls_port() const { return tls_port_; }  // 0 without TLS
  std::string tls_url() const { return "rediss://127.0.0.1:" + std::to_string(tls_port_); }

  // Starts it (again) on the same port; true once it answers.
  bool start();
  // Terminates it and waits for it; SIGKILL if asked (an abrupt crash).
  void stop(bool crash = false);
  bool running() const { return pid_ > 0; }
  // SIGSTOP and SIGCONT; false if the signal could not be sent (no server running).
  bool pause();
  bool resume();

  // One command on a fresh connection; the reply as text (arrays joined by newlines,
  // integers in decimal, nil as "(nil)", errors as their text).
  std::string command(const std::vector<std::string>& args, const std::string& password = "") const;
  // A number from INFO `section` ("memory", "stats", ...): the value of `field`, -1 if
  // the section has no such field.
  long long info_number(const std::string& section, const std::string& field) const;
  // The same, read as a real number (INFO cpu's used_cpu_user, ...); -1 if absent.
  double info_real(const std::string& section, const std::string& field) const;
  // CPU time the server process has used so far (INFO cpu: user + system), microseconds.
  double cpu_us() const {
    return (info_real("cpu", "used_cpu_user") + info_real("cpu", "used_cpu_sys")) * 1e6;
  }
  // INFO commandstats' `field` ("calls", "usec") for command `name` (lowercase, as INFO
  // names it: "bitfield", "get", ...), 0 if the command was never called.
  long long commandstat(const std::string& name, const std::string& field,
                        const std::string& password = "") const;
  // INFO commandstats' count of calls to `name`, 0 if never called.
  long long calls(const std::string& name, const std::string& password = "") const {
    return commandstat(name, "calls", password);
  }
  // Every command's calls and microseconds from INFO commandstats.
  struct CommandStat {
    long long calls = 0;
    long long usec = 0;
  };
  std::map<std::string, CommandStat> commandstats(const std::string& password = "") const;

 private:
  bool answers() const;
  // Throws if the server is not the one server_programs() names (see the class comment).
  void check_programs();
  // The text of `field` in INFO `section` (empty if absent).
  std::string info_field(const std::string& section, const std::string& field) const;

  std::vector<std::string> extra_;
  bool config_ = false;
  std::filesystem::path dir_;
  int port_ = 0;
  int tls_port_ = 0;
  pid_t pid_ = -1;
  bool not_found_ = false;  // the last start could not run the program
};

// A free loopback TCP port, as the kernel reports one now.
int free_port();

}  // namespace ratewin::test
