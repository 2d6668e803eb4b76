#include "redis/layout.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <random>
#include <string_view>
#include <type_traits>

#include "engine/store.h"
#include "redis/slot.h"

namespace ratewin {
inline namespace v1 {
namespace detail {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

// Text made of a few pieces, assembled on the stack: what a key or an argument is made
// of before it is appended, whole, to a string or as one RESP argument.
class Text {
 public:
  Text& operator<<(std::string_view piece) noexcept {
    for (const char c : piece) put(c);
    return *this;
  }
  Text& operator<<(char c) noexcept {
    put(c);
    return *this;
  }
  template <class Int, std::enable_if_t<std::is_integral_v<Int>, int> = 0>
  Text& operator<<(Int n) noexcept {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    return *this << std::string_view(digits, static_cast<std::size_t>(end - digits));
  }
  // 16 hex digits.
  Text& hex16(std::uint64_t value) noexcept {
    char digits[16];
    for (int i = 15; i >= 0; --i, value >>= 4) digits[i] = kHexDigits[value & 15];
    return *this << std::string_view(digits, 16);
  }
  std::string_view view() const noexcept { return {data_.data(), size_}; }

 private:
  void put(char c) noexcept {
    if (size_ < data_.size()) data_[size_++] = c;
  }
  std::array<char, 96> data_{};
  std::size_t size_ = 0;
};

// An argument made of a prefix (of any length) and a tail assembled in a Text.
void arg_of(RespWriter& out, std::string_view prefix, const Text& tail) {
  out.arg_of_length(prefix.size() + tail.view().size());
  out.append(prefix);
  out.append(tail.view());
  out.end_arg();
}

// What follows the prefix in a limiter's key: ":{<resource as 16 hex digits>}:" and its
// kind, "tb", "log", or its geometry and "w".
Text window_key_tail(const LimiterKey& key) {
  Text t;
  t << ":{";
  t.hex16(key.resource) << "}:";
  if (key.bucket()) return t << "tb";
  if (key.log()) return t << "log";
  return t << key.resolution_ms << 'x' << key.subintervals << ":w";
}

std::int64_t floor_mod(std::int64_t value, std::int64_t m) noexcept {
  const std::int64_t r = value % m;
  return r < 0 ? r + m : r;
}

std::uint64_t big_endian(std::string_view bytes, std::size_t at, std::size_t width) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

// `mark` followed by `n` in decimal ("#12"): BITFIELD's offsets in units of the type.
void arg_marked(RespWriter& out, char mark, std::uint64_t n) {
  Text t;
  t << mark << n;
  out.arg(t.view());
}
// BITFIELD offsets of slot s: the whole slot (u48, as #s), its tag (u16, as #3s) and its
// count (u32, a bit offset: 48s + 16 is not a multiple of 32).
void arg_tag_field(RespWriter& out, std::uint32_t s) { arg_marked(out, '#', 3 * std::uint64_t{s}); }
void arg_count_field(RespWriter& out, std::uint32_t s) { out.arg(48 * std::uint64_t{s} + 16); }

// This node's id as entries and members name it: 8 hex digits.
Text node_id_text(std::uint32_t node) {
  Text t;
  for (int i = 7; i >= 0; --i) t << kHexDigits[(node >> (4 * i)) & 15];
  return t;
}

}  // namespace

StoreLayout::StoreLayout(std::string prefix, std::uint32_t node)
    : prefix_(std::move(prefix)), node_(node) {}

std::string StoreLayout::window_key(const LimiterKey& key) const {
  return prefix_ + std::string(window_key_tail(key).view());
}

void StoreLayout::append_window_key(const LimiterKey& key, RespWriter& out) const {
  arg_of(out, prefix_, window_key_tail(key));
}

const std::string& StoreLayout::bucket_script() {
  // ARGV: now's seconds and nanoseconds, emission, tolerance (ns), cost (< 0: given back).
  // The key is kept a tolerance and an emission (the bucket's whole span) after its TAT:
  // writes reach Redis in another order than their engines decided them, and one decided
  // before the last, reaching Redis after the key had expired at that TAT, found no bucket
  // and counted from empty: a span took 2 more than burst + span / emission (an
  // AddressSanitizer run beside a CPU hog).
  static const std::string script =
      "local now_s = tonumber(ARGV[1])\n"
      "local now = tonumber(ARGV[2])\n"
      "local tat = now\n"
      "local v = redis.call('GET', KEYS[1])\n"
      "if v then\n"
      "  local s, ns = struct.unpack('>I4I4', v)\n"
      "  local stored = (s - now_s) * 1e9 + ns\n"
      "  if stored > tat then tat = stored end\n"
      "end\n"
      "local cost = tonumber(ARGV[5])\n"
      "if cost == 0 then return tat - now end\n"
      "local new = tat + cost * tonumber(ARGV[3])\n"
      "if cost > 0 and new - now > tonumber(ARGV[4]) then return -1 - (tat - now) end\n"
      "if new <= now then\n"
      "  redis.call('DEL', KEYS[1])\n"
      "  return 0\n"
      "end\n"
      "local s = math.floor(new / 1e9)\n"
      "redis.call('SET', KEYS[1], struct.pack('>I4I4', now_s + s, new - s * 1e9), 'PX',\n"
      "           math.floor((new - now + tonumber(ARGV[4]) + tonumber(ARGV[3])) / 1e6) + 1)\n"
      "return new - now\n";
  return script;
}

const std::string& StoreLayout::bucket_script_sha() {
  // SHA-1 of bucket_script(): checked against Redis' SCRIPT LOAD by the Redis tests.
  static const std::string sha = "09a00b30cd2fedbd50d89ca2b3ab5389ebf341eb";
  return sha;
}

void StoreLayout::bucket_reply(long long reply, std::span<std::uint64_t> counts) noexcept {
  if (counts.size() <= BucketReply::kBacklog) return;
  counts[BucketReply::kAdmitted] = reply >= 0 ? 1 : 0;
  counts[BucketReply::kBacklog] = static_cast<std::uint64_t>(reply >= 0 ? reply : -1 - reply);
}

const std::string& StoreLayout::log_script() {
  // 'a': ARGV now (us), expiry (us), cost, max, ttl (ms), member prefix, keep (us).
  // Entries are counted while their score is after this write's own now, and dropped only
  // `keep` later: a write that reaches Redis after one decided later than it must still
  // find the entries live at its own time (dropping by the later write's time let a
  // window take max + 1, seen under ThreadSanitizer's delays).
  // 'r': ARGV expiry (us), count, node id.
  static const std::string script =
      "local key = KEYS[1]\n"
      "if ARGV[1] == 'r' then\n"
      "  local id = ARGV[4]\n"
      "  local want = tonumber(ARGV[3])\n"
      "  local taken = 0\n"
      "  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, ARGV[2], ARGV[2])) do\n"
      "    if taken == want then break end\n"
      "    if string.sub(m, 1, #id) == id then\n"
      "      redis.call('ZREM', key, m)\n"
      "      taken = taken + 1\n"
      "    end\n"
      "  end\n"
      "  return taken\n"
      "end\n"
      "local now = tonumber(ARGV[2])\n"
      "redis.call('ZREMRANGEBYSCORE', key, '-inf', now - tonumber(ARGV[8]))\n"
      "local n = redis.call('ZCOUNT', key, '(' .. ARGV[2], '+inf')\n"
      "local cost = tonumber(ARGV[4])\n"
      "local max = tonumber(ARGV[5])\n"
      "local admitted = 0\n"
      "if cost > 0 and n + cost <= max then\n"
      "  if cost == 1 then\n"
      "    redis.call('ZADD', key, ARGV[3], ARGV[7] .. 1)\n"
      "  else\n"
      "    local args = {}\n"
      "    for i = 1, cost do\n"
      "      args[#args + 1] = ARGV[3]\n"
      "      args[#args + 1] = ARGV[7] .. i\n"
      "      if #args == 2000 or i == cost then\n"
      "        redis.call('ZADD', key, unpack(args))\n"
      "        args = {}\n"
      "      end\n"
      "    end\n"
      "  end\n"
      "  redis.call('PEXPIRE', key, ARGV[6])\n"
      "  n = n + cost\n"
      "  if n < max then return n end\n"
      "  admitted = 1\n"
      "end\n"
      "local holds = 0\n"
      "local fits = 0\n"
      "if n > 0 then\n"
      "  local dead = redis.call('ZCARD', key) - n\n"
      "  holds = tonumber(redis.call('ZRANGE', key, dead, dead, 'WITHSCORES')[2]) - now\n"
      "  local k = dead + n + cost - max - 1\n"
      "  if admitted == 0 and k >= dead and k < dead + n then\n"
      "    fits = tonumber(redis.call('ZRANGE', key, k, k, 'WITHSCORES')[2]) - now\n"
      "  end\n"
      "end\n"
      "return {admitted, n, holds, fits}\n";
  return script;
}

const std::string& StoreLayout::log_script_sha() {
  // SHA-1 of log_script(): checked against Redis' SCRIPT LOAD by the Redis tests.
  static const std::string sha = "5edc1e00a5a5d5e4b97c75bee58d3225be0448d9";
  return sha;
}

void StoreLayout::append_heartbeat(std::int64_t now_ms, std::int64_t ttl_ms,
                                   RespWriter& out) const {
  Text nodes;
  nodes << ":{nodes}";
  Text older;
  older << '(' << now_ms - ttl_ms;
  out.command(4);
  out.arg("ZADD");
  arg_of(out, prefix_, nodes);
  out.arg(now_ms);
  out.arg(node_id_text(node_).view());
  out.command(4);
  out.arg("ZREMRANGEBYSCORE");
  arg_of(out, prefix_, nodes);
  out.arg("-inf");
  out.arg(older.view());
  out.command(3);
  out.arg("PEXPIRE");
  arg_of(out, prefix_, nodes);
  out.arg(ttl_ms);
  out.command(2);
  out.arg("ZCARD");
  arg_of(out, prefix_, nodes);
}

namespace {

// A script command's start: EVALSHA <sha> 1, or EVAL <text> 1, of `args` arguments in all.
void begin_script(RespWriter& out, std::size_t args, StoreLayout::Script script,
                  const std::string& sha, const std::string& text) {
  out.command(args);
  if (script == StoreLayout::Script::sha) {
    out.arg("EVALSHA");
    out.arg(sha);
  } else {
    out.arg("EVAL");
    out.arg(text);
  }
  out.arg("1");
}

// A log write's number, so that its members are new even when another of this node's
// writes has the same expiry. It starts at random (48 bits), so that two processes whose
// node ids collide (1 in 2^32 for a pair) still write members of their own.
std::atomic<std::uint64_t>& log_writes() {
  static std::atomic<std::uint64_t> writes{
      (std::random_device()() | (std::uint64_t{std::random_device()()} << 32)) >> 16};
  return writes;
}

}  // namespace

void StoreLayout::log_reply(std::span<const long long> reply, std::int64_t epoch,
                            std::span<std::uint64_t> counts) noexcept {
  if (counts.size() <= LogReply::kFits) return;
  if (reply.size() == 1) {
    // Admitted, and the log not full: its count alone.
    counts[LogReply::kAdmitted] = 1;
    counts[LogReply::kCount] = reply[0] > 0 ? static_cast<std::uint64_t>(reply[0]) : 0;
    counts[LogReply::kHolds] = 0;
    counts[LogReply::kFits] = 0;
    return;
  }
  if (reply.size() < 4) return;
  // The script's times are whole microseconds after floor(epoch / 1 us).
  const std::int64_t now_us = epoch / 1000;
  const auto after = [&](long long us) noexcept -> std::uint64_t {
    const std::int64_t at = (now_us + us) * 1000 - epoch;
    return us > 0 && at > 0 ? static_cast<std::uint64_t>(at) : 0;
  };
  counts[LogReply::kAdmitted] = reply[0] != 0 ? 1 : 0;
  counts[LogReply::kCount] = reply[1] > 0 ? static_cast<std::uint64_t>(reply[1]) : 0;
  counts[LogReply::kHolds] = after(reply[2]);
  counts[LogReply::kFits] = after(reply[3]);
}

namespace {

// For each change-set shard g, a hash tag whose Cluster slot is among the slots of the
// resources it names (256 g .. 256 g + 255): on a cluster whose primaries serve ranges of
// slots, a resource's change set lives on the node of its window. The smallest decimal
// number that hashes there: the same in every process.
const std::array<std::string, StoreLayout::kChangeSetShards>& shard_tags() {
  static const auto tags = [] {
    std::array<std::string, StoreLayout::kChangeSetShards> out;
    std::size_t found = 0;
    for (unsigned i = 0; found < out.size(); ++i) {
      std::string tag = std::to_string(i);
      const unsigned shard = key_slot(tag) >> 8;
      if (out[shard].empty()) {
        out[shard] = std::move(tag);
        ++found;
      }
    }
    return out;
  }();
  return tags;
}

}  // namespace

namespace {

// What follows the prefix in a change set's key.
Text change_set_tail(std::uint32_t resolution_ms, std::uint32_t subintervals, unsigned shard,
                     std::int64_t epoch) {
  Text t;
  t << ":cs:{" << shard_tags()[shard] << "}:" << resolution_ms << 'x' << subintervals << ':'
    << epoch;
  return t;
}

}  // namespace

std::string StoreLayout::change_set_key(std::uint32_t resolution_ms, std::uint32_t subintervals,
                                        unsigned shard, std::int64_t epoch) const {
  return prefix_ + std::string(change_set_tail(resolution_ms, subintervals, shard, epoch).view());
}

void StoreLayout::append_change_set_key(std::uint32_t resolution_ms, std::uint32_t subintervals,
                                        unsigned shard, std::int64_t epoch,
                                        RespWriter& out) const {
  arg_of(out, prefix_, change_set_tail(resolution_ms, subintervals, shard, epoch));
}

std::uint16_t StoreLayout::change_set_slot(unsigned shard) { return key_slot(shard_tags()[shard]); }

std::uint32_t StoreLayout::slot_of(std::int64_t epoch, std::uint32_t subintervals) noexcept {
  return static_cast<std::uint32_t>(floor_mod(epoch, ring_slots(subintervals)));
}

std::uint16_t StoreLayout::tag_of(std::int64_t epoch, std::uint32_t subintervals) noexcept {
  const std::int64_t m = ring_slots(subintervals);
  const std::int64_t lap = (epoch - floor_mod(epoch, m)) / m;
  return static_cast<std::uint16_t>(floor_mod(lap, 65535) + 1);
}

bool StoreLayout::earlier(std::uint16_t tag, std::uint16_t than) noexcept {
  if (tag == 0) return than != 0;
  if (than == 0) return false;
  const std::int64_t behind = floor_mod(std::int64_t{than} - std::int64_t{tag}, 65535);
  return behind != 0 && behind <= 32767;
}

std::int64_t StoreLayout::ttl_ms(const LimiterKey& key) noexcept {
  return (std::int64_t{key.subintervals} + 3) * std::int64_t{key.resolution_ms};
}

unsigned StoreLayout::change_set_shard(std::uint64_t resource) noexcept {
  return resource_slot(resource) >> 8;
}

std::int64_t StoreLayout::change_set_expiry_ms(std::uint32_t resolution_ms,
                                               std::int64_t epoch) noexcept {
  return (epoch + 2) * std::int64_t{resolution_ms};
}

std::pair<std::uint16_t, std::uint32_t> StoreLayout::slot_value(
    std::string_view value, std::int64_t epoch, std::uint32_t subintervals) noexcept {
  const std::size_t at = std::size_t{slot_of(epoch, subintervals)} * kSlotBytes;
  if (at + kSlotBytes > value.size()) return {0, 0};
  return {static_cast<std::uint16_t>(big_endian(value, at, 2)),
          static_cast<std::uint32_t>(big_endian(value, at + 2, 4))};
}

void StoreLayout::decode(std::string_view value, std::int64_t epoch, std::uint32_t subintervals,
                         std::span<std::uint64_t> counts) noexcept {
  // Walk back from the newest epoch, slot and tag stepping down together (no division per
  // epoch: a boundary read decodes a window per key). Going back past slot 0 goes back a
  // lap.
  const std::uint32_t m = ring_slots(subintervals);
  std::uint32_t slot = slot_of(epoch, subintervals);
  std::uint16_t tag = tag_of(epoch, subintervals);
  for (std::size_t k = 0; k < counts.size(); ++k) {
    const std::size_t at = std::size_t{slot} * kSlotBytes;
    counts[k] = at + kSlotBytes <= value.size() && big_endian(value, at, 2) == tag
                    ? big_endian(value, at + 2, 4)
                    : 0;
    if (slot == 0) {
      slot = m - 1;
      tag = tag == 1 ? 65535 : static_cast<std::uint16_t>(tag - 1);
    } else {
      --slot;
    }
  }
}

std::uint64_t StoreLayout::slot_count(std::int64_t slot, std::int64_t epoch,
                                      std::uint32_t subintervals) noexcept {
  return static_cast<std::uint16_t>(slot >> 32) == tag_of(epoch, subintervals)
             ? static_cast<std::uint64_t>(slot & 0xffffffff)
             : 0;
}

std::uint64_t StoreLayout::next_count(std::string_view value, std::int64_t epoch,
                                      std::uint32_t subintervals) noexcept {
  const std::size_t at = std::size_t{slot_of(epoch + 1, subintervals)} * kSlotBytes;
  return at + kSlotBytes <= value.size() &&
                 big_endian(value, at, 2) == tag_of(epoch + 1, subintervals)
             ? big_endian(value, at + 2, 4)
             : 0;
}

void StoreLayout::append_bucket(const StoreWrite& w, std::int64_t cost, RespWriter& out,
                                Script script) const {
  const std::int64_t seconds = w.epoch / 1'000'000'000;
  begin_script(out, 9, script, bucket_script_sha(), bucket_script());
  append_window_key(w.key, out);
  out.arg(seconds);
  out.arg(w.epoch - seconds * 1'000'000'000);
  out.arg(w.emission);
  out.arg(w.tolerance);
  out.arg(cost);
}

void StoreLayout::append_write(const StoreWrite& w, RespWriter& out, Script script) const {
  if (w.key.bucket()) return append_bucket(w, static_cast<std::int64_t>(w.cost), out, script);
  if (w.key.log()) {
    const std::int64_t now_us = w.epoch / 1000;
    const std::int64_t expiry_us = (w.expiry + 999) / 1000;
    // Entries are kept a window after they leave (see log_script), and so is the key.
    const std::int64_t keep_us = expiry_us - now_us;
    const std::int64_t ttl_ms = (2 * (w.expiry - w.epoch) + 999'999) / 1'000'000 + 1;
    Text member;
    member << node_id_text(node_).view() << '.'
           << log_writes().fetch_add(1, std::memory_order_relaxed) << ':';
    begin_script(out, 12, script, log_script_sha(), log_script());
    append_window_key(w.key, out);
    out.arg("a");
    out.arg(now_us);
    out.arg(expiry_us);
    out.arg(w.cost);
    out.arg(w.max);
    out.arg(ttl_ms > 0 ? ttl_ms : 1);
    out.arg(member.view());
    out.arg(keep_us > 0 ? keep_us : 0);
    return;
  }
  if (w.cost == 0) {
    out.command(2);
    out.arg("GET");
    append_window_key(w.key, out);
    return;
  }
  const std::uint32_t n = w.key.subintervals;
  const std::uint32_t s = slot_of(w.epoch, n);
  // BITFIELD <key> OVERFLOW SAT, two claims and the last byte (four words each) on a first
  // write, the count's addition, and the slots either side read (three words each).
  out.command(w.first ? 26 : 14);
  out.arg("BITFIELD");
  append_window_key(w.key, out);
  out.arg("OVERFLOW");
  out.arg("SAT");
  if (w.first) {
    // The two saturating additions that leave max(slot, tag x 2^32) in the slot of e.
    const std::int64_t claimed = std::int64_t{tag_of(w.epoch, n)} << 32;
    for (const std::int64_t step : {-claimed, claimed}) {
      out.arg("INCRBY");
      out.arg("u48");
      arg_marked(out, '#', s);
      out.arg(step);
    }
    // Adding 0 to the ring's last byte changes nothing, but makes a new key the ring's
    // whole size at once: a string that BITFIELD grows later is given twice the room.
    out.arg("INCRBY");
    out.arg("u8");
    arg_marked(out, '#', ring_slots(n) * kSlotBytes - 1);
    out.arg("0");
  }
  out.arg("INCRBY");
  out.arg("u32");
  arg_count_field(out, s);
  out.arg(w.cost);
  // The slots of e - 1 and e + 1 as this command leaves them, atomically with the count.
  for (const std::int64_t e : {w.epoch - 1, w.epoch + 1}) {
    out.arg("GET");
    out.arg("u48");
    arg_marked(out, '#', slot_of(e, n));
  }
  out.command(4);
  out.arg("GETEX");
  append_window_key(w.key, out);
  out.arg("PX");
  out.arg(ttl_ms(w.key));
  if (!w.first) return;
  const unsigned shard = change_set_shard(w.key.resource);
  char entry[kChangeEntryBytes];
  for (std::size_t i = 0; i < 8; ++i)
    entry[i] = static_cast<char>((w.key.resource >> (8 * i)) & 0xff);
  for (std::size_t i = 0; i < 4; ++i) entry[8 + i] = static_cast<char>((node_ >> (8 * i)) & 0xff);
  out.command(3);
  out.arg("APPEND");
  append_change_set_key(w.key.resolution_ms, n, shard, w.epoch, out);
  out.arg(std::string_view(entry, sizeof entry));
  // Every time, though the time is the same: a change set that expired and that a late
  // APPEND makes again must not be left without an expiry.
  out.command(3);
  out.arg("PEXPIREAT");
  append_change_set_key(w.key.resolution_ms, n, shard, w.epoch, out);
  out.arg(change_set_expiry_ms(w.key.resolution_ms, w.epoch));
}

void StoreLayout::append_give_back(const StoreWrite& give_back, RespWriter& out,
                                   Script script) const {
  if (give_back.key.bucket())
    return append_bucket(give_back, -static_cast<std::int64_t>(give_back.cost), out, script);
  if (give_back.key.log()) {
    begin_script(out, 8, script, log_script_sha(), log_script());
    append_window_key(give_back.key, out);
    out.arg("r");
    out.arg((give_back.expiry + 999) / 1000);
    out.arg(give_back.cost);
    out.arg(node_id_text(node_).view());
    return;
  }
  const std::uint32_t s = slot_of(give_back.epoch, give_back.key.subintervals);
  out.command(11);
  out.arg("BITFIELD");
  append_window_key(give_back.key, out);
  out.arg("GET");
  out.arg("u16");
  arg_tag_field(out, s);
  out.arg("OVERFLOW");
  out.arg("FAIL");
  out.arg("INCRBY");
  out.arg("u32");
  arg_count_field(out, s);
  out.arg(-static_cast<std::int64_t>(give_back.cost));
  out.command(3);
  out.arg("PEXPIRE");
  append_window_key(give_back.key, out);
  out.arg(ttl_ms(give_back.key));
}

void StoreLayout::append_adjust(const LimiterKey& key, std::int64_t epoch, std::int64_t delta,
                                std::uint16_t tag, RespWriter& out) const {
  const std::uint32_t s = slot_of(epoch, key.subintervals);
  out.command(tag != 0 ? 12 : 8);  // BITFIELD <key> [SET u16 <tag field> <tag>] OVERFLOW ...
  out.arg("BITFIELD");
  append_window_key(key, out);
  if (tag != 0) {
    out.arg("SET");
    out.arg("u16");
    arg_tag_field(out, s);
    out.arg(tag);
  }
  out.arg("OVERFLOW");
  out.arg("SAT");
  out.arg("INCRBY");
  out.arg("u32");
  arg_count_field(out, s);
  out.arg(delta);
  out.command(3);
  out.arg("PEXPIRE");
  append_window_key(key, out);
  out.arg(ttl_ms(key));
}

void StoreLayout::append_reset(const LimiterKey& key, RespWriter& out) const {
  out.command(2);
  out.arg("DEL");
  append_window_key(key, out);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
