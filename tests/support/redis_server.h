// A private redis-server for a test: started on a free loopback port, stopped by PID.
#pragma once

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ratewin::test {

// Starts `redis-server` (from PATH) as a child process, with no persistence, bound to
// 127.0.0.1 on a port the kernel reported free, and waits until it answers PING. Never
// touches a system service: it ends only the process it started.
class RedisServer {
 public:
  explicit RedisServer(std::vector<std::string> extra_args = {}) : extra_(std::move(extra_args)) {
    dir_ = std::filesystem::temp_directory_path() /
           ("ratewin-redis-" + std::to_string(::getpid()) + "-" + std::to_string(next_id()));
    std::filesystem::create_directories(dir_);
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      if (start()) return;
    }
    throw std::runtime_error("could not start redis-server");
  }
  ~RedisServer() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string socket_path() const { return (dir_ / "redis.sock").string(); }

  // Starts it (again) on the same port; true once it answers.
  bool start() {
    if (pid_ > 0) return true;
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.string(),
                                     "--unixsocket",
                                     socket_path(),
                                     "--unixsocketperm",
                                     "700",
                                     "--daemonize",
                                     "no",
                                     "--loglevel",
                                     "warning",
                                     "--logfile",
                                     (dir_ / "log").string()};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited: port taken, or no binary
        pid_ = -1;
        return false;
      }
      if (answers()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    return false;
  }
  // Terminates it and waits for it; SIGKILL if asked (an abrupt crash).
  void stop(bool crash = false) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, crash ? SIGKILL : SIGTERM);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }

  // One command on a fresh connection; the reply as text (arrays joined by newlines).
  std::string command(const std::vector<std::string>& args,
                      const std::string& password = "") const {
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
  // A number from INFO `section` ("memory", "stats", ...): the value of `field`, -1 if
  // the section has no such field.
  long long info_number(const std::string& section, const std::string& field) const {
    const std::string info = "\n" + command({"INFO", section});
    const std::string tag = "\n" + field + ":";
    const auto at = info.find(tag);
    return at == std::string::npos ? -1 : std::atoll(info.c_str() + at + tag.size());
  }
  // INFO commandstats' `field` ("calls", "usec") for command `name` (lowercase), 0 if
  // the command was never called.
  long long commandstat(const std::string& name, const std::string& field,
                        const std::string& password = "") const {
    const std::string info = command({"INFO", "commandstats"}, password);
    const auto line = info.find("cmdstat_" + name + ":");
    if (line == std::string::npos) return 0;
    const auto end = info.find('\n', line);
    for (const char* separator : {":", ","}) {
      const auto at = info.find(separator + field + "=", line);
      if (at != std::string::npos && at < end) {
        return std::atoll(info.c_str() + at + 1 + field.size() + 1);
      }
    }
    return 0;
  }
  // INFO commandstats' count of calls to `name` (lowercase), 0 if never called.
  long long calls(const std::string& name, const std::string& password = "") const {
    return commandstat(name, "calls", password);
  }

 private:
  static int next_id() {
    static int id = 0;
    return ++id;
  }
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }
  static std::string text(const redisReply* r) {
    if (r->type == REDIS_REPLY_ARRAY) {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) out += text(r->element[i]) + "\n";
      return out;
    }
    if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
    if (r->type == REDIS_REPLY_NIL) return "(nil)";
    return std::string(r->str, r->len);
  }
  bool answers() const {
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

  std::vector<std::string> extra_;
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace ratewin::test
