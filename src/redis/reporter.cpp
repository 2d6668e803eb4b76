#include "redis/reporter.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace ratewin {
inline namespace v1 {
namespace detail {

std::string credentials_problem(const std::string& where, bool given, const Status& failure) {
  if (failure.code() != Status::Code::auth) return failure.message();
  if (!given) {
    return "Redis at " + where +
           " requires a password and none was given: put it in the URL "
           "(redis://[user:]password@host:port) (" + failure.message() + ")";
  }
  return "Redis at " + where + " refused the user or password in the URL (" + failure.message() +
         ")";
}

std::string_view error_reason(std::string_view message) noexcept {
  // Redis' error codes worth telling apart (its first word of an error reply).
  static constexpr std::array<std::string_view, 18> kCodes = {
      "NOPERM",   "NOAUTH",   "WRONGPASS", "READONLY",  "OOM",      "MISCONF",
      "CLUSTERDOWN", "LOADING", "BUSY",    "MASTERDOWN", "NOSCRIPT", "WRONGTYPE",
      "CROSSSLOT", "TRYAGAIN", "EXECABORT", "NOREPLICAS", "MOVED",   "ASK"};
  // An error raised inside a script (Redis 7: "ERR user_script:1: ...", 6: "ERR Error
  // running script ...").
  if (message.find("user_script:") != std::string_view::npos ||
      message.find("Error running script") != std::string_view::npos) {
    return "SCRIPT";
  }
  bool err = false;
  for (std::size_t i = 0; i < message.size();) {
    while (i < message.size() && std::isupper(static_cast<unsigned char>(message[i])) == 0) ++i;
    std::size_t end = i;
    while (end < message.size() && std::isupper(static_cast<unsigned char>(message[end])) != 0)
      ++end;
    const std::string_view word = message.substr(i, end - i);
    const bool whole = (i == 0 || std::isalnum(static_cast<unsigned char>(message[i - 1])) == 0) &&
                       (end == message.size() ||
                        std::isalnum(static_cast<unsigned char>(message[end])) == 0);
    if (whole) {
      for (const std::string_view code : kCodes)
        if (word == code) return code;
      err |= word == "ERR";
    }
    i = end;
  }
  if (err) return "ERR";
  const auto has = [&](std::string_view what) {
    return message.find(what) != std::string_view::npos;
  };
  if (has("timed out") || has("timeout")) return "timeout";
  if (has("unavailable") || has("connect") || has("refused")) return "connect";
  if (has("closed")) return "closed";
  return "other";
}

void Reporter::note_error(const std::string& error, bool aside) {
  const std::string_view reason = error_reason(error);
  // What failed: the message's context (up to its first ':'), with its reason.
  std::string logged(reason);
  logged += ' ';
  logged += std::string_view(error).substr(0, error.find(':'));
  bool log_it = false;
  {
    std::lock_guard lock(mutex_);
    auto counted = std::find_if(errors_.begin(), errors_.end(),
                                [&](const auto& e) { return e.first == reason; });
    if (counted == errors_.end()) {
      errors_.emplace_back(std::string(reason), 1);
    } else {
      ++counted->second;
    }
    last_error_ = error;
    if (aside) return;
    if (logged_.size() < 16 && std::find(logged_.begin(), logged_.end(), logged) == logged_.end()) {
      logged_.push_back(std::move(logged));
      log_it = true;
    }
    failing_.store(true, std::memory_order_relaxed);
  }
  if (log_it) log(LogLevel::warning, "Redis at " + where_ + ": " + error);
}

void Reporter::recovered() {
  {
    std::lock_guard lock(mutex_);
    if (!failing_.load(std::memory_order_relaxed)) return;
    failing_.store(false, std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    if (logged_.empty() || now - forgotten_ < std::chrono::seconds(10)) return;
    logged_.clear();
    forgotten_ = now;
  }
  // (At the failures' level: whoever saw them, a setup showing warnings only among them,
  // sees their end.)
  log(LogLevel::warning, "Redis at " + where_ + ": commands succeed again");
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
