// How an internal call ended: ratewin's one error convention inside the library and its
// tools (docs/architecture.md, "Errors"). An action returns a Status; a call that makes
// something returns a Result<T>, the thing or the Status of why not. Exceptions stay at the
// public C++ boundary (include/ratewin), where they are part of the API.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ratewin {
inline namespace v1 {
namespace internal {

// One small value for every internal call that can fail (leveldb's Status): a code that
// callers branch on, and a message for people. An ok status holds no message and costs no
// allocation.
class Status {
 public:
  enum class Code {
    ok,
    busy,         // every pooled connection stayed lent until the deadline (not Redis' fault)
    connect,      // no connection could be made (refused, unreachable, no such socket)
    timeout,      // a deadline passed
    io,           // the connection failed or closed while in use
    closed,       // closed on our side (shutting down)
    auth,         // Redis refused the credentials (or wants some)
    tls,          // the TLS layer failed (handshake, certificate)
    unavailable,  // Redis answered that it cannot serve now (READONLY, LOADING, ...)
    redirect,     // MOVED or ASK: another node serves the key
    retry,        // TRYAGAIN: the key's slot is moving between nodes
    noscript,     // EVALSHA of a script Redis does not hold
    refused,      // another error reply
    protocol,     // a reply that is not what the command returns
    invalid,      // the input or a setting is not acceptable (said to whoever gave it)
  };

  Status() noexcept = default;  // ok
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const noexcept { return code_ == Code::ok; }
  Code code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // Whether this failure says the node cannot be used now, so that its circuit opens
  // (later calls fail at once until a probe finds it back): it could not be reached, its
  // connection failed, it refused the credentials, or it said it cannot serve. Not for a
  // busy pool, a redirection, an error reply to one command, or our own shutdown.
  bool opens_circuit() const noexcept {
    switch (code_) {
      case Code::connect:
      case Code::timeout:
      case Code::io:
      case Code::auth:
      case Code::tls:
      case Code::unavailable:
        return true;
      default:
        return false;
    }
  }

  // The status of a Redis error reply, by its error code (its first word).
  static Status of_error_reply(std::string_view text);

  // The same status, its message preceded by `context` (": " between them).
  Status within(std::string_view context) const {
    return Status(code_, std::string(context) + ": " + message_);
  }

 private:
  Code code_ = Code::ok;
  std::string message_;
};

// A T, or the Status that says why there is none (C++20 has no std::expected). Made from
// either; a Status given must not be ok.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit
  Result(Status failure) : value_(std::in_place_index<1>, std::move(failure)) {}  // NOLINT

  bool ok() const noexcept { return value_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  T& operator*() & { return std::get<0>(value_); }
  const T& operator*() const& { return std::get<0>(value_); }
  T&& operator*() && { return std::get<0>(std::move(value_)); }
  T* operator->() { return &std::get<0>(value_); }
  const T* operator->() const { return &std::get<0>(value_); }
  // Why there is no value (an ok Status when there is one).
  Status status() const { return ok() ? Status() : std::get<1>(value_); }
  const std::string& message() const {
    static const std::string none;
    return ok() ? none : std::get<1>(value_).message();
  }

 private:
  std::variant<T, Status> value_;
};

}  // namespace internal
}  // namespace v1
}  // namespace ratewin
