#include "redis_server.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ratewin::test {
namespace {

int next_id() {
  static int id = 0;
  return ++id;
}

ServerPrograms programs_named(const char* value) {
  const std::string name = value == nullptr ? "" : value;
  if (name.empty() || name == "redis") return {"redis", "redis-server", "redis-cli"};
  if (name == "valkey") return {"valkey", "valkey-server", "valkey-cli"};
  throw std::runtime_error("RATEWIN_TEST_REDIS=" + name +
                           ": the tests run against \"redis\" (the default: redis-server, "
                           "redis-cli) or \"valkey\" (valkey-server, valkey-cli)");
}

// The last lines of a server's log file, for an error message.
std::string log_tail(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > 5 ? lines.size() - 5 : 0; i < lines.size(); ++i)
    out += "\n  " + lines[i];
  return out;
}

}  // namespace

const ServerPrograms& server_programs() {
  // A bad value throws on every call (a static whose initializer throws stays unset).
  static const ServerPrograms chosen = programs_named(std::getenv("RATEWIN_TEST_REDIS"));
  return chosen;
}

// A free loopback port of at most 55535: a Cluster node's bus listens 10000 above its port,
// and Redis and Valkey refuse a port past 55535 in cluster mode. The kernel's pick is
// redrawn until it fits (about one in five of Linux's ephemeral range does not).
int free_port() {
  constexpr int kHighest = 65535 - 10000;
  int port = 0;
  for (int draw = 0; draw < 64; ++draw) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    port = ntohs(addr.sin_port);
    if (port <= kHighest) break;
  }
  return port;
}

namespace {

std::string text(const redisReply* r) {
  if (r->type == REDIS_REPLY_ARRAY) {
    std::string out;
    for (size_t i = 0; i < r->elements; ++i) {
      out += text(r->element[i]);
      out += '\n';
    }
    return out;
  }
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  if (r->type == REDIS_REPLY_NIL) return "(nil)";
  return std::string(r->str, r->len);
}

}  // namespace

RedisServer::RedisServer(std::vector<std::string> extra_args, const std::string& config)
    : RedisServer(std::move(extra_args), config, ServerTls{}) {}

RedisServer::RedisServer(std::vector<std::string> extra_args, const std::string& config,
                         const ServerTls& tls)
    : extra_(std::move(extra_args)), config_(!config.empty()) {
  const ServerPrograms& programs = server_programs();  // throws before anything is made
  dir_ = std::filesystem::temp_directory_path() /
         ("ratewin-redis-" + std::to_string(::getpid()) + "-" + std::to_string(next_id()));
  std::filesystem::create_directories(dir_);
  if (config_) std::ofstream(dir_ / "redis.conf") << config << '\n';
  const std::size_t plain_args = extra_.size();
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = free_port();
    if (!tls.cert.empty()) {
      do {
        tls_port_ = free_port();
      } while (tls_port_ == port_);
      extra_.resize(plain_args);
      extra_.insert(extra_.end(),
                    {"--tls-port", std::to_string(tls_port_), "--tls-cert-file", tls.cert,
                     "--tls-key-file", tls.key, "--tls-ca-cert-file", tls.ca,
                     "--tls-auth-clients", tls.auth_clients ? "yes" : "no"});
    }
    if (start()) {
      check_programs();
      return;
    }
  }
  std::string why = "RATEWIN_TEST_REDIS=" + programs.name + ": ";
  if (not_found_) {
    why += "cannot run " + programs.server + ": not found on PATH";
  } else {
    why += programs.server + " did not start in 5 attempts; the end of its log:";
    why += log_tail(dir_ / "log");
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
  throw std::runtime_error(why);
}

void RedisServer::check_programs() {
  // Once per process, on the first server that answers INFO (a server with a password
  // answers NOAUTH: the next one is asked). A redis-server that is Valkey under another
  // name, or the reverse, would run one suite twice against the same server.
  static std::atomic<bool> checked = false;
  if (checked) return;
  const std::string info = command({"INFO", "server"});
  if (info.find("redis_version:") == std::string::npos) return;
  const bool valkey = info.find("\nserver_name:valkey") != std::string::npos;
  if (valkey != (server_programs().name == "valkey")) {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw std::runtime_error(
        server_programs().server + " says it is " + (valkey ? "Valkey" : "not Valkey") +
        " (RATEWIN_TEST_REDIS=" + server_programs().name + "); its INFO server:\n" + info);
  }
  checked = true;
}

RedisServer::~RedisServer() {
  stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

bool RedisServer::start() {
  if (pid_ > 0) return true;
  std::vector<std::string> args = {server_programs().server, "--port", std::to_string(port_),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                   "--dir", dir_.string(), "--unixsocket", socket_path(),
                                   "--unixsocketperm", "700", "--daemonize", "no",
                                   "--loglevel", "warning", "--logfile", (dir_ / "log").string()};
  if (config_) args.insert(args.begin() + 1, (dir_ / "redis.conf").string());
  args.insert(args.end(), extra_.begin(), extra_.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    // Redis writes to its log file. Its standard streams are not the test's: a child that
    // outlives a test killed by a sanitizer would otherwise hold ctest's output pipe open,
    // and ctest would wait for it until its timeout. It dies with the test, too.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken, or no binary
      not_found_ = WIFEXITED(status) && WEXITSTATUS(status) == 127;
      pid_ = -1;
      return false;
    }
    if (answers()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop();
  return false;
}

void RedisServer::stop(bool crash) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, crash ? SIGKILL : SIGTERM);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool RedisServer::pause() { return pid_ > 0 && ::kill(pid_, SIGSTOP) == 0; }
bool RedisServer::resume() { return pid_ > 0 && ::kill(pid_, SIGCONT) == 0; }

std::string RedisServer::command(const std::vector<std::string>& args,
                                 const std::string& password) const {
  redisContext* c = redisConnect("127.0.0.1", port_);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return "(cannot connect)";
  }
  if (!password.empty()) freeReplyObject(redisCommand(c, "AUTH %s", password.c_str()));
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  std::string out = r == nullptr ? "(no reply)" : text(r);
  if (r != nullptr) freeReplyObject(r);
  redisFree(c);
  return out;
}

std::string RedisServer::info_field(const std::string& section, const std::string& field) const {
  // Appended, not "\n" + ...: GCC 12 at -O3 warns (-Wrestrict) on operator+(const char*,
  // std::string&&), a false positive (GCC bug 105329).
  std::string info(1, '\n');
  info += command({"INFO", section});
  std::string tag(1, '\n');
  tag += field;
  tag += ':';
  const auto at = info.find(tag);
  if (at == std::string::npos) return {};
  const auto end = info.find_first_of("\r\n", at + tag.size());
  return info.substr(at + tag.size(), end == std::string::npos ? end : end - at - tag.size());
}

double RedisServer::info_real(const std::string& section, const std::string& field) const {
  const std::string value = info_field(section, field);
  return value.empty() ? -1 : std::atof(value.c_str());
}

long long RedisServer::info_number(const std::string& section, const std::string& field) const {
  const std::string value = info_field(section, field);
  return value.empty() ? -1 : std::atoll(value.c_str());
}

std::map<std::string, RedisServer::CommandStat> RedisServer::commandstats(
    const std::string& password) const {
  // Lines of "cmdstat_<name>:calls=N,usec=N,usec_per_call=F,..."
  std::map<std::string, CommandStat> out;
  std::istringstream in(command({"INFO", "commandstats"}, password));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cmdstat_", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    CommandStat& stat = out[line.substr(8, colon - 8)];
    std::istringstream fields(line.substr(colon + 1));
    for (std::string field; std::getline(fields, field, ',');) {
      const auto eq = field.find('=');
      if (eq == std::string::npos) continue;
      const std::string name = field.substr(0, eq);
      if (name == "calls") stat.calls = std::atoll(field.c_str() + eq + 1);
      if (name == "usec") stat.usec = std::atoll(field.c_str() + eq + 1);
    }
  }
  return out;
}

long long RedisServer::commandstat(const std::string& name, const std::string& field,
                                   const std::string& password) const {
  const auto stats = commandstats(password);
  const auto it = stats.find(name);
  if (it == stats.end()) return 0;
  return field == "calls" ? it->second.calls : field == "usec" ? it->second.usec : 0;
}

bool RedisServer::answers() const {
  timeval tv{0, 200'000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  bool ok = false;
  if (c != nullptr && c->err == 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    // A password-protected server answers NOAUTH: it is up all the same.
    ok = r != nullptr;
    if (r != nullptr) freeReplyObject(r);
  }
  if (c != nullptr) redisFree(c);
  return ok;
}

}  // namespace ratewin::test
