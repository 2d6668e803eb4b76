// RESP, Redis' protocol: commands written once into a reused buffer, and replies parsed
// into reply objects that are recycled, so that steady traffic allocates nothing.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "redis/status.h"

struct redisReader;
struct redisReply;

namespace ratewin {
inline namespace v1 {
namespace detail {

// Commands in RESP (an array of bulk strings each), appended to one buffer that clear()
// empties without giving its memory back. It remembers where each command starts, so
// that one can be sent again on its own (a redirection). Not thread-safe.
class RespWriter {
 public:
  // Starts a command of `args` arguments (the arguments follow, each by arg()). Throws
  // std::logic_error when the command before it got another number of arguments than it
  // declared (a mistake in the code that writes it).
  void command(std::size_t args) {
    check_complete();
    starts_.push_back(out_.size());
    mark('*', args);
    missing_ = static_cast<std::ptrdiff_t>(args);
  }
  // A whole command.
  void command(std::initializer_list<std::string_view> args) {
    command(args.size());
    for (const std::string_view a : args) arg(a);
  }
  void command(std::span<const std::string_view> args) {
    command(args.size());
    for (const std::string_view a : args) arg(a);
  }
  void arg(std::string_view value) {
    mark('$', value.size());
    out_ += value;
    out_ += "\r\n";
    --missing_;
  }
  // An integer, in decimal.
  template <class Int, std::enable_if_t<std::is_integral_v<Int>, int> = 0>
  void arg(Int value) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    arg(std::string_view(digits, static_cast<std::size_t>(end - digits)));
  }
  // An argument written in pieces: its length, then append() exactly that many bytes.
  void arg_of_length(std::size_t length) {
    mark('$', length);
    --missing_;
  }
  void append(std::string_view bytes) { out_ += bytes; }
  void end_arg() { out_ += "\r\n"; }

  // Everything written, and the commands in it.
  std::string_view bytes() const noexcept { return out_; }
  std::size_t size() const noexcept { return out_.size(); }
  std::size_t commands() const noexcept { return starts_.size(); }
  // Command `i`'s bytes.
  std::string_view command_bytes(std::size_t i) const noexcept {
    const std::size_t end = i + 1 < starts_.size() ? starts_[i + 1] : out_.size();
    return std::string_view(out_).substr(starts_[i], end - starts_[i]);
  }
  // Appends a command as it was written elsewhere (from another writer's command_bytes).
  void copy_command(std::string_view command) {
    check_complete();
    starts_.push_back(out_.size());
    out_ += command;
  }
  void clear() noexcept {
    out_.clear();
    starts_.clear();
    missing_ = 0;
  }
  // Throws std::logic_error unless the last command has all the arguments it declared.
  void check_complete() const;

 private:
  void mark(char kind, std::size_t n) {
    char text[24];
    text[0] = kind;
    const auto end = std::to_chars(text + 1, text + sizeof text - 2, n).ptr;
    out_.append(text, static_cast<std::size_t>(end - text));
    out_ += "\r\n";
  }

  std::string out_;
  std::vector<std::size_t> starts_;
  std::ptrdiff_t missing_ = 0;  // arguments the last command still needs
};

// A callable referred to, not owned (no allocation, nothing copied): valid while the
// callable it was made from lives, so only as an argument of a call that does not keep it.
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>, int> = 0>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): passed as a callable
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

// The reply objects hiredis' reader makes (redisReply, as its own functions make them),
// taken from free lists and given back to them: small strings and arrays inline, larger
// ones in buffers of a few sizes that are kept too. One pool per reader; not thread-safe.
class ReplyPool;

// Replies parsed from the bytes of a connection: hiredis' reader, with its objects from
// a ReplyPool. Not thread-safe.
class RespReader {
 public:
  RespReader();
  ~RespReader();
  RespReader(const RespReader&) = delete;
  RespReader& operator=(const RespReader&) = delete;

  // Bytes received.
  Status feed(const char* data, std::size_t size);
  // The next complete reply in `out` (null: more bytes are needed). The caller gives it
  // back with release() once done with it (or lets the next call do so).
  Status next(redisReply*& out);
  void release(redisReply* reply) noexcept;
  // Forgets the bytes of a stream that ended (a connection made again starts afresh).
  void reset();

 private:
  std::unique_ptr<ReplyPool> pool_;
  redisReader* reader_;
  redisReply* last_ = nullptr;
};

// The text of an error or status reply, for messages.
std::string reply_text(const redisReply& reply);

// The status of a reply: ok, or the error reply's (Status::of_error_reply).
Status status_of(const redisReply& reply);

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
