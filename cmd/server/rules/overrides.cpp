#include "rules/overrides.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <vector>

#include "common/json_writer.h"
#include "common/text.h"
#include "rules/rules.h"

namespace ratewin::server {

using internal::RedisClient;
using internal::RedisReply;
using namespace std::chrono_literals;

std::int64_t unix_ms() noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::uint64_t Override::apply(std::uint64_t max) const noexcept {
  return max_from(kind == Kind::limit ? value : static_cast<double>(max) * value);
}

std::string Override::encode() const {
  std::string out = kind == Kind::limit ? "limit " : "multiplier ";
  append_double(out, value);
  out += ' ';
  out += std::to_string(expires_ms);
  return out;
}

std::optional<Override> Override::decode(std::string_view text) {
  Override o;
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view kind = text.substr(0, space);
  if (kind == "limit") {
    o.kind = Kind::limit;
  } else if (kind == "multiplier") {
    o.kind = Kind::multiplier;
  } else {
    return std::nullopt;
  }
  const char* p = text.data() + space + 1;
  const char* end = text.data() + text.size();
  auto r = std::from_chars(p, end, o.value);
  if (r.ec != std::errc() || r.ptr == end || *r.ptr != ' ' || !(o.value > 0)) return std::nullopt;
  r = std::from_chars(r.ptr + 1, end, o.expires_ms);
  if (r.ec != std::errc() || r.ptr != end) return std::nullopt;
  return o;
}

void Override::to_json(JsonWriter& w, std::string_view key) const {
  w.begin_object().key("key").string(key);
  w.key(kind == Kind::limit ? "limit" : "multiplier").number(value);
  w.key("expires_in_s").number(std::max<std::int64_t>(0, expires_ms - unix_ms()) / 1000);
  w.end_object();
}

Overrides::Overrides(RedisTarget redis, std::string key_prefix, Log log)
    : redis_(std::move(redis)),
      hash_key_(key_prefix + ":server:overrides"),
      channel_(key_prefix + ":server:overrides"),
      log_(std::move(log)),
      current_(std::make_shared<const OverrideMap>()) {
  if (redis_.empty()) return;
  in_sync_ = false;
  thread_ = std::thread([this] { run(); });
  writer_ = std::make_unique<JobQueue>(kMaxQueuedChanges);
}

Overrides::~Overrides() {
  writer_.reset();  // the change being made goes on; those waiting are not made
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Overrides::publish_local(const std::function<void(OverrideMap&)>& change) {
  std::lock_guard lock(local_mutex_);
  auto next = std::make_shared<OverrideMap>(*current_.get());
  const std::int64_t now = unix_ms();
  std::erase_if(*next, [now](const auto& entry) { return !entry.second.active(now); });
  change(*next);
  current_.publish(std::move(next));
}

namespace {

// What is left until `deadline`, at most `most`; 0 once it has passed.
std::chrono::milliseconds left_until(Overrides::Deadline deadline,
                                     std::chrono::milliseconds most = 24h) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return std::clamp(left, 0ms, most);
}

// A change not made because its deadline passed.
Status too_late(std::string why) { return Status(Status::Code::timeout, std::move(why)); }

// A change not made because Redis did not answer in time (`ran`: how the round trip ended).
Status unanswered(const Status& ran) {
  return Status(ran.code(), "not made: Redis did not answer before the change's deadline (" +
                                ran.message() + ")");
}

}  // namespace

Status Overrides::command(Deadline deadline, const std::function<Status(RedisClient&)>& body) {
  std::lock_guard lock(command_mutex_);
  if (command_connection_ == nullptr || !command_connection_->usable()) {
    const std::chrono::milliseconds left = left_until(deadline, 1000ms);
    if (left == 0ms) return too_late("not made: its deadline passed before Redis could be reached");
    Result<std::unique_ptr<RedisClient>> opened = RedisClient::open(redis_, left, left, hash_key_);
    if (!opened) return opened.status().within("not made: Redis");
    command_connection_ = *std::move(opened);
  }
  Status result = body(*command_connection_);
  // A failure may mean that the hash's slot moved (MOVED), or that this server is a
  // replica now (READONLY): the next command connects afresh, to where the hash lives.
  if (!result.ok()) command_connection_.reset();
  return result;
}

namespace {

// Runs commands in one round trip; an error reply or a failure is the outcome.
Status run_all(RedisClient& c, std::span<const RedisClient::Argv> commands) {
  std::vector<RedisReply> replies;
  if (const Status ran = c.run(commands, replies, 1s); !ran.ok()) return ran.within("Redis");
  for (const RedisReply& r : replies) {
    if (r.is_error()) return Status(Status::Code::refused, "Redis: " + r.text);
  }
  return {};
}

}  // namespace

Status Overrides::write(const OverrideChange& change, Deadline deadline) {
  // Sets (ARGV[2] an encoded override) or removes (ARGV[2] empty) and announces, only
  // while Redis's clock is at most ARGV[3] (ms). Returns 1 when made, 0 when too late.
  static constexpr std::string_view kChangeBefore =
      "if redis.replicate_commands then redis.replicate_commands() end "
      "local t = redis.call('TIME') "
      "if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[3]) then "
      "return 0 end "
      "if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) "
      "else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end "
      "redis.call('PUBLISH', ARGV[4], ARGV[1]) return 1";
  return command(deadline, [&](RedisClient& c) -> Status {
    using std::chrono::steady_clock;
    // Redis's clock read TIME at some moment of ours before `after`: from then on its
    // clock is at least TIME + (our time - after), so a cut-off of TIME + (deadline -
    // after) on its clock falls at our deadline or before it.
    std::vector<RedisReply> replies;
    const RedisClient::Argv time[] = {{"TIME"}};
    const std::chrono::milliseconds wait = left_until(deadline);
    if (wait == 0ms) return too_late("not made: its deadline passed before it could be sent");
    if (const Status ran = c.run(time, replies, wait); !ran.ok()) return unanswered(ran);
    const steady_clock::time_point after = steady_clock::now();
    long long seconds = 0;
    long long micros = 0;
    if (replies.size() != 1 || replies[0].type != RedisReply::Type::kArray ||
        replies[0].elements.size() != 2 ||
        std::from_chars(replies[0].elements[0].text.data(),
                        replies[0].elements[0].text.data() + replies[0].elements[0].text.size(),
                        seconds)
                .ec != std::errc() ||
        std::from_chars(replies[0].elements[1].text.data(),
                        replies[0].elements[1].text.data() + replies[0].elements[1].text.size(),
                        micros)
                .ec != std::errc()) {
      return Status(Status::Code::protocol,
                    "not made: Redis: TIME gave " +
                        (replies.empty() ? std::string("no reply") : replies[0].text));
    }
    const auto to_deadline =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - after).count();
    if (to_deadline <= 0) return too_late("not made: its deadline passed before it could be sent");
    const std::string cutoff = std::to_string(seconds * 1000 + micros / 1000 + to_deadline);
    const std::string value = change.value ? change.value->encode() : std::string();
    const RedisClient::Argv script[] = {
        {"EVAL", kChangeBefore, "1", hash_key_, change.key, value, cutoff, channel_}};
    replies.clear();
    if (const Status ran = c.run(script, replies, left_until(deadline + kAnswerMargin));
        !ran.ok()) {
      // (No answer by now: were it run later, Redis's clock would be past the cut-off.)
      return unanswered(ran);
    }
    if (replies.size() != 1) return Status(Status::Code::protocol, "not made: Redis gave no reply");
    if (replies[0].is_error())
      return Status(Status::Code::refused, "not made: Redis: " + replies[0].text);
    if (replies[0].integer != 1) return too_late("not made: it reached Redis after its deadline");
    return {};
  });
}

Status Overrides::apply(const OverrideChange& change, Deadline deadline) {
  if (shared()) {
    if (Status written = write(change, deadline); !written.ok()) return written;
  }
  publish_local([&](OverrideMap& map) {
    if (change.value) {
      map[change.key] = *change.value;
    } else {
      map.erase(change.key);
    }
  });
  return {};
}

bool Overrides::submit(OverrideChange change, Deadline deadline, Done done) {
  return enqueue([this, change = std::move(change), deadline] { return apply(change, deadline); },
                 std::move(done));
}

bool Overrides::submit_job(JobQueue::Job job, Done done) {
  return enqueue(std::move(job), std::move(done));
}

bool Overrides::enqueue(JobQueue::Job job, Done done) {
  if (writer_ == nullptr) {
    done(job());
    return true;
  }
  return writer_->submit(std::move(job), std::move(done));
}

bool Overrides::reload(RedisClient& connection) {
  auto next = std::make_shared<OverrideMap>();
  std::vector<std::pair<std::string, std::string>> expired;  // key, value as read
  std::string error;
  const std::int64_t now = unix_ms();
  const RedisClient::Argv read[] = {{"HGETALL", hash_key_}};
  std::vector<RedisReply> replies;
  if (const Status ran = connection.run(read, replies, 1s); !ran.ok()) {
    error = ran.message();
  } else if (replies.size() != 1 || replies[0].type != RedisReply::Type::kArray) {
    error = replies.empty() ? "no reply" : replies[0].text;
  } else {
    const std::vector<RedisReply>& fields = replies[0].elements;
    for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
      // A value this version cannot read (a newer one wrote it) is left alone.
      const std::optional<Override> o = Override::decode(fields[i + 1].text);
      if (!o) continue;
      if (o->active(now)) {
        (*next)[fields[i].text] = *o;
      } else if (o->expires_ms + kCleanupGrace.count() <= now) {
        expired.emplace_back(fields[i].text, fields[i + 1].text);
      }
    }
  }
  if (!error.empty()) {
    log_(LogLevel::warning, "overrides: reading Redis: " + error);
    return false;
  }
  {
    std::lock_guard lock(local_mutex_);
    current_.publish(std::move(next));
  }
  reloads_.fetch_add(1, std::memory_order_relaxed);
  if (!expired.empty()) {
    // Any instance may clean up, long after expiry (clocks differ), and only what it read:
    // an override set again meanwhile stays.
    static constexpr std::string_view kDeleteIfSame =
        "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then "
        "return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0";
    std::vector<RedisClient::Argv> commands;
    commands.reserve(expired.size());
    for (const auto& [k, v] : expired)
      commands.push_back({"EVAL", kDeleteIfSame, "1", hash_key_, k, v});
    run_all(connection, commands);  // failures do not matter: the next reload retries
  }
  return true;
}

void Overrides::run() {
  auto backoff = 100ms;
  bool warned = false;
  const auto stopping = [this](std::chrono::milliseconds wait) {
    std::unique_lock lock(stop_mutex_);
    return stop_cv_.wait_for(lock, wait, [this] { return stop_; });
  };
  while (!stopping(0ms)) {
    std::string error;
    // The subscriber listens on any node (on a Cluster a PUBLISH reaches every node); the
    // reader reads the hash where it lives.
    std::unique_ptr<RedisClient> subscriber;
    std::unique_ptr<RedisClient> reader;
    Result<std::unique_ptr<RedisClient>> opened = RedisClient::open(redis_, 1s, 1s);
    if (opened) {
      subscriber = *std::move(opened);
      opened = RedisClient::open(redis_, 1s, 1s, hash_key_);
      if (opened) reader = *std::move(opened);
    }
    const RedisClient::Argv subscribe[] = {{"SUBSCRIBE", channel_}};
    if (reader == nullptr) {
      error = opened.message();
      if (error.empty()) error = "no connection";
    } else if (const Status subscribed = run_all(*subscriber, subscribe); !subscribed.ok()) {
      error = subscribed.message();
    } else if (!reload(*reader)) {
      error = "reading " + hash_key_ + " failed (logged above)";
    }
    if (!error.empty()) {
      in_sync_ = false;
      if (!warned) log_(LogLevel::warning, "overrides: cannot follow Redis: " + error);
      warned = true;
      if (stopping(backoff)) return;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      continue;
    }
    in_sync_ = true;
    if (warned) log_(LogLevel::info, "overrides: following Redis again");
    warned = false;
    backoff = 100ms;
    auto last = std::chrono::steady_clock::now();
    for (;;) {
      if (stopping(0ms)) return;
      RedisReply message;
      const Status got = subscriber->receive(message, 200ms);
      if (!got.ok() && got.code() != Status::Code::timeout) {
        error = got.message();
        break;
      }
      const bool announced = got.ok() && message.type == RedisReply::Type::kArray &&
                             message.elements.size() == 3 && message.elements[0].text == "message";
      if (announced || std::chrono::steady_clock::now() - last >= kRefresh) {
        if (!reload(*reader)) break;
        last = std::chrono::steady_clock::now();
      }
    }
    in_sync_ = false;
    log_(LogLevel::warning, "overrides: lost Redis: " + error);
    warned = true;
  }
}

std::string Overrides::active_json(std::int64_t now_ms) const {
  const std::shared_ptr<const OverrideMap> all = current_.get();
  std::vector<std::pair<std::string_view, const Override*>> sorted;
  for (const auto& [k, o] : *all)
    if (o.active(now_ms)) sorted.emplace_back(k, &o);
  std::sort(sorted.begin(), sorted.end());
  std::string b;
  JsonWriter w(b);
  w.begin_array();
  for (const auto& [key, o] : sorted) o->to_json(w, key);
  w.end_array();
  return b;
}

}  // namespace ratewin::server
