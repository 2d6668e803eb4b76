#include "redis/async.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <utility>

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{50};
constexpr std::chrono::milliseconds kMaxBackoff{2000};
constexpr std::size_t kLoopReadChunk = std::size_t{64} * 1024;

void free_poll(uv_handle_t* handle) { delete reinterpret_cast<uv_poll_t*>(handle); }

}  // namespace

AsyncRedis::AsyncRedis(uv_loop_t* loop, RedisEndpoint endpoint,
                       std::chrono::milliseconds connect_timeout,
                       std::chrono::milliseconds command_timeout, Events events)
    : loop_(loop),
      endpoint_(std::move(endpoint)),
      connect_timeout_(connect_timeout),
      command_timeout_(command_timeout),
      events_(std::move(events)),
      backoff_(kFirstBackoff),
      jitter_(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(this) ^ uv_hrtime())),
      chunk_(std::make_unique<char[]>(kLoopReadChunk)) {
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  uv_timer_init(loop_, &watchdog_);
  watchdog_.data = this;
}

AsyncRedis::~AsyncRedis() = default;

void AsyncRedis::start() {
  const auto period =
      static_cast<std::uint64_t>(std::max<std::int64_t>(5, command_timeout_.count() / 4));
  uv_timer_start(&watchdog_, &AsyncRedis::on_watchdog, period, period);
  connect_now();
}

void AsyncRedis::arm(TimerAction action, std::chrono::milliseconds delay) {
  timer_action_ = action;
  uv_timer_start(&timer_, &AsyncRedis::on_timer, static_cast<std::uint64_t>(delay.count()), 0);
}

void AsyncRedis::connect_now() {
  state_ = State::kConnecting;
  login_failed_ = false;
  Status status;
  transport_ = Transport::open(endpoint_, status);
  if (transport_ == nullptr) {
    lose(status);
    return;
  }
  arm(TimerAction::kConnectDeadline, connect_timeout_);
  pump(0);
}

void AsyncRedis::watch() {
  if (transport_ == nullptr) return;
  if (poll_ != nullptr && polled_fd_ != transport_->fd()) {
    // The transport tried another address, on another socket.
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), &free_poll);
    poll_ = nullptr;
  }
  if (poll_ == nullptr) {
    poll_ = new uv_poll_t;
    if (uv_poll_init(loop_, poll_, transport_->fd()) != 0) {
      delete poll_;
      poll_ = nullptr;
      abort(Status(Status::Code::io,
                   "cannot watch the connection to " + endpoint_.describe() + " on the loop"));
      return;
    }
    poll_->data = this;
    polled_fd_ = transport_->fd();
    watching_ = 0;
  }
  int events = 0;
  if (wants_ == Io::Result::want_write || written_ < out_.size()) events |= UV_WRITABLE;
  if (state_ != State::kConnecting || wants_ == Io::Result::want_read) events |= UV_READABLE;
  if (events == watching_) return;
  watching_ = events;
  uv_poll_start(poll_, events, &AsyncRedis::on_poll);
}

void AsyncRedis::on_poll(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<AsyncRedis*>(handle->data);
  if (handle != self->poll_) return;  // (a handle being closed)
  if (status < 0) {
    self->abort(Status(Status::Code::io, "connection to " + self->endpoint_.describe() +
                                             " failed: " + uv_strerror(status)),
                self->state_ == State::kReady);
    return;
  }
  self->pump(events);
}

void AsyncRedis::pump(int events) {
  if (transport_ == nullptr) return;
  const std::uint64_t generation = generation_;
  if (state_ == State::kConnecting) {
    Status status;
    const Io io = transport_->handshake(status);
    if (io.result == Io::Result::failed || io.result == Io::Result::closed) {
      abort(status);
      return;
    }
    wants_ = io.result == Io::Result::done ? Io::Result::done : io.result;
    if (io.result == Io::Result::done) {
      state_ = State::kLoggingIn;
      log_in();
      if (generation != generation_) return;
    }
  }
  if (state_ != State::kConnecting) {
    if ((events & UV_READABLE) != 0 && !read_in()) return;
    if (generation != generation_ || transport_ == nullptr) return;
    if (!write_out()) return;
  }
  watch();
}

void AsyncRedis::log_in() {
  arm(TimerAction::kLoginDeadline, command_timeout_ + connect_timeout_);
  auto refused = [this](const char* what) {
    return [this, what](const redisReply* reply, const Status& failure) {
      if (reply != nullptr && reply->type != REDIS_REPLY_ERROR) return;
      if (login_failed_) return;
      login_failed_ = true;
      const Status refusal = reply != nullptr ? status_of(*reply) : failure;
      last_failure_ = refusal.within(std::string(what) + " on " + endpoint_.describe());
      // Ended from the timer, not inside the reply's own handling.
      arm(TimerAction::kLoginDeadline, std::chrono::milliseconds(0));
    };
  };
  for (const auto& command : endpoint_.login_commands()) {
    out_.command(command.size());
    for (const std::string& arg : command) out_.arg(arg);
    expect({nullptr, refused(command.front() == "AUTH" ? "authentication failed" : "SELECT failed"),
            false, false});
  }
  out_.command({"PING"});
  expect({nullptr,
          [this, fail = refused("PING failed")](const redisReply* reply, const Status& failure) {
            fail(reply, failure);
            if (reply == nullptr || reply->type == REDIS_REPLY_ERROR || login_failed_) return;
            uv_timer_stop(&timer_);
            timer_action_ = TimerAction::kNone;
            state_ = State::kReady;
            backoff_ = kFirstBackoff;
            ready_since_ms_ = now_ms();
            if (events_.ready) events_.ready();
          },
          false, false});
}

void AsyncRedis::expect(Pending pending) {
  // The watchdog measures silence from the oldest command still waiting: sending more
  // to a server that has stopped answering is not progress.
  if (pending.counted && in_flight_++ == 0) last_progress_ms_ = now_ms();
  queue_.push_back(std::move(pending));
}

void AsyncRedis::command(std::initializer_list<std::string_view> args, ReplyFn done) {
  if (state_ != State::kReady) {
    done(nullptr, state_ == State::kClosed
                      ? Status(Status::Code::closed, "closed")
                      : Status(Status::Code::connect,
                               "not connected" + (last_failure_.ok()
                                                      ? std::string()
                                                      : " (" + last_failure_.message() + ")")));
    return;
  }
  out_.command(args);
  expect({nullptr, std::move(done), false, true});
  watch();
}

void AsyncRedis::command_resp(std::string_view resp, ReplyFn done) {
  if (state_ != State::kReady) {
    if (done) {
      done(nullptr, state_ == State::kClosed ? Status(Status::Code::closed, "closed")
                                             : Status(Status::Code::connect, "not connected"));
    }
    return;
  }
  out_.copy_command(resp);
  expect({nullptr, std::move(done), false, true});
  watch();
}

bool AsyncRedis::command_formatted(std::string_view resp, void* context) {
  if (state_ != State::kReady || raw_handler_ == nullptr) return false;
  out_.copy_command(resp);
  expect({context, {}, true, true});
  watch();
  return true;
}

void AsyncRedis::flush() {
  if (state_ != State::kReady) return;
  last_progress_ms_ = now_ms();  // queueing a batch counts as progress
  if (write_out()) watch();
}

bool AsyncRedis::write_out() {
  while (written_ < out_.size()) {
    Status status;
    const std::string_view bytes = out_.bytes();
    const Io io = transport_->write(bytes.data() + written_, bytes.size() - written_, status);
    if (io.result == Io::Result::done) {
      written_ += io.bytes;
      continue;
    }
    if (io.result == Io::Result::want_write || io.result == Io::Result::want_read) {
      wants_ = io.result;
      return true;
    }
    abort(status.within("connection to " + endpoint_.describe() + " lost"),
          state_ == State::kReady);
    return false;
  }
  // Everything is out: the buffer starts afresh (keeping its memory).
  out_.clear();
  written_ = 0;
  if (wants_ == Io::Result::want_write) wants_ = Io::Result::done;
  return true;
}

std::string AsyncRedis::hint(const Status& failure) const {
  return state_ == State::kLoggingIn ? login_failure_hint(endpoint_, failure) : std::string();
}

bool AsyncRedis::read_in() {
  const std::uint64_t generation = generation_;
  // A few chunks at a turn of the loop, each answered before the next is read: a long
  // stream of replies neither holds the loop nor piles up unparsed (the socket, still
  // readable, brings the rest at the next turn).
  // (What TLS read ahead is taken too: the socket will not say it is there.)
  for (int chunks = 0; chunks < 4 || transport_->buffered(); ++chunks) {
    Status status;
    const Io io = transport_->read(chunk_.get(), kLoopReadChunk, status);
    if (io.result == Io::Result::want_read || io.result == Io::Result::want_write) {
      // (A TLS read may have to write first.)
      if (io.result == Io::Result::want_write) wants_ = io.result;
      return true;
    }
    if (io.result != Io::Result::done) {
      const bool ready = state_ == State::kReady;
      abort(io.result == Io::Result::closed
                ? Status(Status::Code::io,
                         "connection closed by " + endpoint_.describe() + hint(status))
                : Status(status.code(), "connection to " + endpoint_.describe() +
                                            " lost: " + status.message() + hint(status)),
            ready && io.result == Io::Result::closed);
      return false;
    }
    if (Status fed = in_.feed(chunk_.get(), io.bytes); !fed.ok()) {
      abort(Status(fed.code(), fed.message() + hint(fed)));
      return false;
    }
    for (;;) {
      redisReply* reply = nullptr;
      if (Status parsed = in_.next(reply); !parsed.ok()) {
        abort(Status(parsed.code(), parsed.message() + hint(parsed)));
        return false;
      }
      if (reply == nullptr) break;
      if (queue_head_ == queue_.size()) {
        abort(Status(Status::Code::protocol,
                     "a reply from " + endpoint_.describe() + " to no command"));
        return false;
      }
      Pending pending = std::move(queue_[queue_head_++]);
      if (queue_head_ == queue_.size()) {
        queue_.clear();
        queue_head_ = 0;
      } else if (queue_head_ >= 1024 && queue_head_ * 2 >= queue_.size()) {
        // (Commands keep coming while replies arrive: drop the answered ones now and
        // then, so that the queue holds only what is in flight.)
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(queue_head_));
        queue_head_ = 0;
      }
      if (pending.counted && in_flight_ > 0) --in_flight_;
      last_progress_ms_ = now_ms();
      if (pending.raw) {
        raw_handler_(reply, pending.context);
      } else if (pending.done) {
        pending.done(reply, Status());
      }
      in_.release(reply);
      if (generation != generation_) return false;  // ended from the callback
    }
  }
  return true;
}

void AsyncRedis::fail_pending(const Status& failure) {
  // Taken out first: a callback may queue commands of its own (they fail at once, the
  // connection being down).
  std::vector<Pending> failing;
  failing.swap(queue_);
  const std::size_t head = queue_head_;
  queue_head_ = 0;
  in_flight_ = 0;
  for (std::size_t i = head; i < failing.size(); ++i) {
    if (failing[i].raw) {
      raw_handler_(nullptr, failing[i].context);
    } else if (failing[i].done) {
      failing[i].done(nullptr, failure);
    }
  }
}

void AsyncRedis::close_transport() {
  ++generation_;
  if (poll_ != nullptr) {
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), &free_poll);
    poll_ = nullptr;
  }
  polled_fd_ = -1;
  watching_ = 0;
  transport_.reset();
  out_.clear();
  written_ = 0;
  wants_ = Io::Result::done;
  in_.reset();  // the old stream's bytes are gone
}

void AsyncRedis::abort(const Status& failure, bool dropped) {
  close_transport();
  fail_pending(failure);
  lose(failure, dropped);
}

void AsyncRedis::lose(const Status& failure, bool dropped) {
  if (state_ == State::kClosed) return;
  last_failure_ = failure;
  state_ = State::kBackoff;
  in_flight_ = 0;
  if (events_.lost) events_.lost(failure, dropped);
  if (state_ == State::kClosed) return;  // closed from the callback
  if (dropped && now_ms() - ready_since_ms_ >= 1000) {
    // It had been working for a while: try again now rather than after a backoff (a
    // server that drops every connection at once still gets the backoff).
    arm(TimerAction::kReconnect, std::chrono::milliseconds(0));
    return;
  }
  // Full jitter over the upper half, so nodes that lost Redis together do not
  // reconnect in lockstep.
  std::uniform_int_distribution<std::int64_t> spread(backoff_.count() / 2, backoff_.count());
  const std::chrono::milliseconds delay(spread(jitter_));
  backoff_ = std::min(kMaxBackoff, backoff_ * 2);
  arm(TimerAction::kReconnect, delay);
}

void AsyncRedis::on_timer(uv_timer_t* timer) {
  auto* self = static_cast<AsyncRedis*>(timer->data);
  const TimerAction action = self->timer_action_;
  self->timer_action_ = TimerAction::kNone;
  switch (action) {
    case TimerAction::kConnectDeadline:
      if (self->state_ == State::kConnecting) {
        self->abort(connect_timed_out(self->transport_.get(), self->endpoint_.describe(),
                                      self->connect_timeout_));
      }
      break;
    case TimerAction::kLoginDeadline:
      if (self->state_ == State::kLoggingIn) {
        self->abort(self->login_failed_
                        ? self->last_failure_
                        : Status(Status::Code::timeout,
                                 "logging in to " + self->endpoint_.describe() + " timed out"));
      }
      break;
    case TimerAction::kReconnect:
      if (self->state_ == State::kBackoff) self->connect_now();
      break;
    case TimerAction::kNone:
      break;
  }
}

void AsyncRedis::on_watchdog(uv_timer_t* timer) {
  auto* self = static_cast<AsyncRedis*>(timer->data);
  if (self->state_ != State::kReady || self->in_flight_ == 0) return;
  const std::uint64_t silent = now_ms() - self->last_progress_ms_;
  if (silent > static_cast<std::uint64_t>(self->command_timeout_.count())) {
    self->abort(Status(Status::Code::timeout, "no reply from " + self->endpoint_.describe() +
                                                  " for " + std::to_string(silent) + " ms"));
  }
}

void AsyncRedis::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  uv_timer_stop(&timer_);
  uv_timer_stop(&watchdog_);
  close_transport();
  fail_pending(Status(Status::Code::closed, "closed"));
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&watchdog_), nullptr);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
