#include "redis/async.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace ratewin::inline v1::detail {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{50};
constexpr std::chrono::milliseconds kMaxBackoff{2000};

// hiredis's event hooks on a libuv poll handle, in place of hiredis 0.14's own libuv
// adapter, which restarts the poll handle every time hiredis asks to watch for writes,
// that is for every command queued; libuv carries out each restart as epoll_ctl calls,
// and a boundary read of 100,000 limiters spent about a third of its time in them.
// Here asking for what is already watched does nothing. Attaching also fails cleanly
// when the poll handle cannot be made (the adapter left hooks behind that crashed).
struct LoopEvents {
  redisAsyncContext* context = nullptr;
  uv_poll_t handle{};
  int events = 0;
};

void on_poll(uv_poll_t* handle, int status, int events) {
  auto* p = static_cast<LoopEvents*>(handle->data);
  if (status != 0) return;
  if (p->context != nullptr && (events & UV_READABLE) != 0) redisAsyncHandleRead(p->context);
  if (p->context != nullptr && (events & UV_WRITABLE) != 0) redisAsyncHandleWrite(p->context);
}

void watch(void* data, int events) {
  auto* p = static_cast<LoopEvents*>(data);
  if (events == p->events) return;
  p->events = events;
  if (events != 0) {
    uv_poll_start(&p->handle, events, &on_poll);
  } else {
    uv_poll_stop(&p->handle);
  }
}

int attach(redisAsyncContext* ac, uv_loop_t* loop) {
  if (ac->ev.data != nullptr) return REDIS_ERR;
  auto* p = new (std::nothrow) LoopEvents;
  if (p == nullptr) return REDIS_ERR;
  if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
    delete p;
    return REDIS_ERR;
  }
  p->context = ac;
  p->handle.data = p;
  ac->ev.addRead = [](void* d) { watch(d, static_cast<LoopEvents*>(d)->events | UV_READABLE); };
  ac->ev.delRead = [](void* d) { watch(d, static_cast<LoopEvents*>(d)->events & ~UV_READABLE); };
  ac->ev.addWrite = [](void* d) { watch(d, static_cast<LoopEvents*>(d)->events | UV_WRITABLE); };
  ac->ev.delWrite = [](void* d) { watch(d, static_cast<LoopEvents*>(d)->events & ~UV_WRITABLE); };
  ac->ev.cleanup = [](void* d) {
    auto* events = static_cast<LoopEvents*>(d);
    events->context = nullptr;  // the context may be gone before the handle closes
    uv_close(reinterpret_cast<uv_handle_t*>(&events->handle),
             [](uv_handle_t* h) { delete static_cast<LoopEvents*>(h->data); });
  };
  ac->ev.data = p;
  return REDIS_OK;
}

}  // namespace

// Reply objects for the connection's reader, the same redisReply structs hiredis makes,
// but from a free list with small strings and element vectors inline: a boundary read
// parses hundreds of thousands of replies, each otherwise 3 to 4 mallocs and frees.
// Used by the loop thread only.
class AsyncRedis::ReplyPool {
 public:
  ReplyPool() = default;
  ReplyPool(const ReplyPool&) = delete;
  ReplyPool& operator=(const ReplyPool&) = delete;
  ~ReplyPool() {
    while (free_ != nullptr) {
      Block* b = free_;
      free_ = b->next_free;
      delete b;
    }
  }

  static redisReplyObjectFunctions functions;

 private:
  static constexpr std::size_t kInline = 48;
  struct Block {
    redisReply reply;  // first: a redisReply* is a Block*
    ReplyPool* pool;
    Block* next_free;
    alignas(void*) char data[kInline];
  };

  // A reply block of `type`, not yet linked to its parent; nullptr when out of memory
  // (hiredis then fails the connection). No exception may cross hiredis' C frames.
  static redisReply* make(const redisReadTask* task, int type) noexcept {
    auto* pool = static_cast<ReplyPool*>(task->privdata);
    Block* b = pool->free_;
    if (b != nullptr) {
      pool->free_ = b->next_free;
    } else {
      b = new (std::nothrow) Block;
      if (b == nullptr) return nullptr;
      b->pool = pool;
    }
    b->reply = redisReply{};
    b->reply.type = type;
    return &b->reply;
  }
  // Hands a complete reply to its parent (if any): from then on the parent frees it.
  static redisReply* link(const redisReadTask* task, redisReply* r) noexcept {
    if (task->parent != nullptr) {
      static_cast<redisReply*>(task->parent->obj)->element[task->idx] = r;
    }
    return r;
  }
  // Returns a block that could not be completed to the free list.
  static void* give_up(redisReply* r) noexcept {
    Block* b = reinterpret_cast<Block*>(r);
    b->next_free = b->pool->free_;
    b->pool->free_ = b;
    return nullptr;
  }
  static void* create_string(const redisReadTask* task, char* str, std::size_t len) {
    redisReply* r = make(task, task->type);
    if (r == nullptr) return nullptr;
    Block* b = reinterpret_cast<Block*>(r);
    char* buf = len < kInline ? b->data : static_cast<char*>(std::malloc(len + 1));
    if (buf == nullptr) return give_up(r);
    std::memcpy(buf, str, len);
    buf[len] = '\0';
    r->str = buf;
    r->len = len;
    return link(task, r);
  }
  static void* create_array(const redisReadTask* task, int elements) {
    redisReply* r = make(task, REDIS_REPLY_ARRAY);
    if (r == nullptr) return nullptr;
    Block* b = reinterpret_cast<Block*>(r);
    const auto n = static_cast<std::size_t>(elements > 0 ? elements : 0);
    if (n > 0) {
      r->element = n * sizeof(redisReply*) <= kInline
                       ? reinterpret_cast<redisReply**>(b->data)
                       : static_cast<redisReply**>(std::calloc(n, sizeof(redisReply*)));
      if (r->element == nullptr) return give_up(r);
      std::fill_n(r->element, n, nullptr);
    }
    r->elements = n;
    return link(task, r);
  }
  static void* create_integer(const redisReadTask* task, long long value) {
    redisReply* r = make(task, REDIS_REPLY_INTEGER);
    if (r == nullptr) return nullptr;
    r->integer = value;
    return link(task, r);
  }
  static void* create_nil(const redisReadTask* task) {
    redisReply* r = make(task, REDIS_REPLY_NIL);
    return r == nullptr ? nullptr : link(task, r);
  }
  static void free_object(void* object) {
    auto* r = static_cast<redisReply*>(object);
    if (r == nullptr) return;
    Block* b = reinterpret_cast<Block*>(r);
    if (r->type == REDIS_REPLY_ARRAY && r->element != nullptr) {
      for (std::size_t i = 0; i < r->elements; ++i) free_object(r->element[i]);
      if (reinterpret_cast<char*>(r->element) != b->data) std::free(r->element);
    } else if (r->str != nullptr && r->str != b->data) {
      std::free(r->str);
    }
    b->next_free = b->pool->free_;
    b->pool->free_ = b;
  }

  Block* free_ = nullptr;
};

redisReplyObjectFunctions AsyncRedis::ReplyPool::functions = {
    &ReplyPool::create_string, &ReplyPool::create_array, &ReplyPool::create_integer,
    &ReplyPool::create_nil, &ReplyPool::free_object};

struct AsyncRedis::Pending {
  AsyncRedis* self;
  ReplyFn done;
  bool counted;  // a caller's command (counted in in_flight_), not part of logging in
};

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
      replies_(std::make_unique<ReplyPool>()) {
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
  redisAsyncContext* ac = endpoint_.unix_path.empty()
                              ? redisAsyncConnect(endpoint_.host.c_str(), endpoint_.port)
                              : redisAsyncConnectUnix(endpoint_.unix_path.c_str());
  if (ac == nullptr) {
    lose("cannot allocate a Redis context");
    return;
  }
  if (ac->err != 0) {
    const std::string error = ac->errstr;
    redisAsyncFree(ac);
    lose("cannot connect to " + endpoint_.describe() + ": " + error);
    return;
  }
  ac->data = this;
  // Replies from the pool (the reader has parsed nothing yet).
  ac->c.reader->fn = &ReplyPool::functions;
  ac->c.reader->privdata = replies_.get();
  if (attach(ac, loop_) != REDIS_OK) {
    redisAsyncFree(ac);
    lose("cannot attach the Redis connection to the loop");
    return;
  }
  context_ = ac;
  redisAsyncSetConnectCallback(ac, &AsyncRedis::on_connect);
  redisAsyncSetDisconnectCallback(ac, &AsyncRedis::on_disconnect);
  arm(TimerAction::kConnectDeadline, connect_timeout_);
}

void AsyncRedis::on_connect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<AsyncRedis*>(ac->data);
  if (self->context_ != ac) return;
  if (status != REDIS_OK) {
    // hiredis frees the context when this returns.
    self->context_ = nullptr;
    self->lose("cannot connect to " + self->endpoint_.describe() + ": " + ac->errstr);
    return;
  }
  self->state_ = State::kLoggingIn;
  self->log_in();
}

void AsyncRedis::log_in() {
  arm(TimerAction::kLoginDeadline, command_timeout_ + connect_timeout_);
  auto refused = [this](const char* what) {
    return [this, what](const redisReply* reply, const std::string& error) {
      if (reply != nullptr && reply->type != REDIS_REPLY_ERROR) return;
      if (login_failed_) return;
      login_failed_ = true;
      last_error_ = std::string(what) + " on " + endpoint_.describe() + ": " +
                    (reply != nullptr ? reply_text(*reply) : error);
      // The context cannot be freed inside its own callback: end it from the timer.
      arm(TimerAction::kLoginDeadline, std::chrono::milliseconds(0));
    };
  };
  for (const auto& command : endpoint_.login_commands()) {
    send(RedisConnection::Argv(command.begin(), command.end()),
         refused(command.front() == "AUTH" ? "authentication failed" : "SELECT failed"));
  }
  send({"PING"},
       [this, fail = refused("PING failed")](const redisReply* reply, const std::string& error) {
         fail(reply, error);
         if (reply == nullptr || reply->type == REDIS_REPLY_ERROR || login_failed_) return;
         uv_timer_stop(&timer_);
         timer_action_ = TimerAction::kNone;
         state_ = State::kReady;
         backoff_ = kFirstBackoff;
         ready_since_ms_ = now_ms();
         if (events_.ready) events_.ready();
       });
}

void AsyncRedis::send(const RedisConnection::Argv& argv, ReplyFn done) {
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  args.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const std::string_view a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  const bool counted = state_ == State::kReady;
  auto* pending = new Pending{this, std::move(done), counted};
  if (redisAsyncCommandArgv(context_, &AsyncRedis::on_reply, pending, static_cast<int>(args.size()),
                            args.data(), lengths.data()) != REDIS_OK) {
    std::unique_ptr<Pending> owned(pending);
    owned->done(nullptr, "cannot send the command");
    return;
  }
  // The watchdog measures silence from the oldest command still waiting: sending more
  // to a server that has stopped answering is not progress.
  if (counted && in_flight_++ == 0) last_progress_ms_ = now_ms();
}

void AsyncRedis::command(const RedisConnection::Argv& argv, ReplyFn done) {
  if (state_ != State::kReady || context_ == nullptr) {
    done(nullptr, state_ == State::kClosed
                      ? std::string("closed")
                      : "not connected" + (last_error_.empty() ? "" : " (" + last_error_ + ")"));
    return;
  }
  send(argv, std::move(done));
}

bool AsyncRedis::command_formatted(std::string_view resp, void* context) {
  if (state_ != State::kReady || context_ == nullptr || raw_handler_ == nullptr) return false;
  if (redisAsyncFormattedCommand(context_, &AsyncRedis::on_raw_reply, context, resp.data(),
                                 resp.size()) != REDIS_OK) {
    return false;
  }
  if (in_flight_++ == 0) last_progress_ms_ = now_ms();
  return true;
}

void AsyncRedis::flush() {
  if (state_ != State::kReady || context_ == nullptr) return;
  last_progress_ms_ = now_ms();  // queueing a batch counts as progress
  redisAsyncHandleWrite(context_);
}

void AsyncRedis::on_raw_reply(redisAsyncContext* ac, void* reply, void* privdata) {
  // Freed or not, the context still carries its owner in `data`.
  auto* self = static_cast<AsyncRedis*>(ac->data);
  if (self->in_flight_ > 0) --self->in_flight_;
  self->last_progress_ms_ = now_ms();
  self->raw_handler_(static_cast<const redisReply*>(reply), privdata);
}

void AsyncRedis::on_reply(redisAsyncContext* /*ac*/, void* reply, void* privdata) {
  std::unique_ptr<Pending> pending(static_cast<Pending*>(privdata));
  AsyncRedis* self = pending->self;
  if (pending->counted && self->in_flight_ > 0) --self->in_flight_;
  self->last_progress_ms_ = now_ms();
  if (reply == nullptr) {
    pending->done(nullptr, self->fail_reason_.empty() ? "connection lost" : self->fail_reason_);
  } else {
    pending->done(static_cast<const redisReply*>(reply), std::string());
  }
}

void AsyncRedis::on_disconnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<AsyncRedis*>(ac->data);
  if (self->context_ != ac) return;  // we are freeing it ourselves
  self->context_ = nullptr;
  self->lose(status == REDIS_OK
                 ? "connection closed by " + self->endpoint_.describe()
                 : "connection to " + self->endpoint_.describe() + " lost: " + ac->errstr,
             self->state_ == State::kReady);
}

void AsyncRedis::abort(const std::string& reason) {
  if (context_ != nullptr) {
    redisAsyncContext* ac = context_;
    context_ = nullptr;  // on_disconnect, if hiredis calls it, then knows it is ours
    fail_reason_ = reason;
    redisAsyncFree(ac);  // runs the in-flight callbacks with a null reply
    fail_reason_.clear();
  }
  lose(reason);
}

void AsyncRedis::lose(const std::string& reason, bool dropped) {
  if (state_ == State::kClosed) return;
  last_error_ = reason;
  state_ = State::kBackoff;
  in_flight_ = 0;
  if (events_.lost) events_.lost(reason, dropped);
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
        self->abort("connecting to " + self->endpoint_.describe() + " timed out after " +
                    std::to_string(self->connect_timeout_.count()) + " ms");
      }
      break;
    case TimerAction::kLoginDeadline:
      if (self->state_ == State::kLoggingIn) {
        self->abort(self->login_failed_
                        ? self->last_error_
                        : "logging in to " + self->endpoint_.describe() + " timed out");
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
    self->abort("no reply from " + self->endpoint_.describe() + " for " + std::to_string(silent) +
                " ms");
  }
}

void AsyncRedis::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  uv_timer_stop(&timer_);
  uv_timer_stop(&watchdog_);
  if (context_ != nullptr) {
    redisAsyncContext* ac = context_;
    context_ = nullptr;
    fail_reason_ = "closed";
    redisAsyncFree(ac);
    fail_reason_.clear();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&watchdog_), nullptr);
}

}  // namespace ratewin::inline v1::detail
