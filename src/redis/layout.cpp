#include "redis/layout.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <random>

#include "engine/store.h"
#include "redis/slot.h"

namespace ratewin::inline v1::detail {
namespace {

void append_hex16(std::string& out, std::uint64_t value) {
  constexpr char kDigits[] = "0123456789abcdef";
  char digits[16];
  for (int i = 15; i >= 0; --i, value >>= 4) digits[i] = kDigits[value & 15];
  out.append(digits, 16);
}

std::string geometry(std::uint32_t resolution_ms, std::uint32_t subintervals) {
  std::string out = std::to_string(resolution_ms);
  out += 'x';
  out += std::to_string(subintervals);
  return out;
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

// BITFIELD offsets of slot s: the whole slot (u48, as #s), its tag (u16, as #3s) and its
// count (u32, a bit offset: 48s + 16 is not a multiple of 32).
std::string tag_field(std::uint32_t s) { return marked('#', 3 * std::uint64_t{s}); }
std::string count_field(std::uint32_t s) { return std::to_string(48 * std::uint64_t{s} + 16); }

}  // namespace

StoreLayout::StoreLayout(std::string prefix, std::uint32_t node)
    : prefix_(std::move(prefix)), node_(node) {}

std::string StoreLayout::window_key(const LimiterKey& key) const {
  std::string out = prefix_;
  out += ":{";
  append_hex16(out, key.resource);
  if (key.bucket()) {
    out += "}:tb";
    return out;
  }
  if (key.log()) {
    out += "}:log";
    return out;
  }
  out += "}:";
  out += geometry(key.resolution_ms, key.subintervals);
  out += ":w";
  return out;
}

const std::string& StoreLayout::bucket_script() {
  // ARGV: now's seconds and nanoseconds, emission, tolerance (ns), cost (< 0: given back).
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
      "           math.floor((new - now) / 1e6) + 1)\n"
      "return new - now\n";
  return script;
}

const std::string& StoreLayout::bucket_script_sha() {
  // SHA-1 of bucket_script(): checked against Redis' SCRIPT LOAD by the Redis tests.
  static const std::string sha = "988f383165cba5233bb9407131b74d82bb8007c8";
  return sha;
}

Command StoreLayout::bucket_command(const LimiterKey& key, std::int64_t epoch,
                                    std::int64_t emission, std::int64_t tolerance,
                                    std::int64_t cost) const {
  const std::int64_t seconds = epoch / 1'000'000'000;
  return {"EVALSHA",
          bucket_script_sha(),
          "1",
          window_key(key),
          std::to_string(seconds),
          std::to_string(epoch - seconds * 1'000'000'000),
          std::to_string(emission),
          std::to_string(tolerance),
          std::to_string(cost)};
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

namespace {

std::string node_id_text(std::uint32_t node) {
  std::string out;
  append_hex16(out, node);
  out.erase(0, 8);
  out += '.';
  return out;
}

}  // namespace

std::vector<Command> StoreLayout::heartbeat_commands(std::int64_t now_ms,
                                                     std::int64_t ttl_ms) const {
  const std::string key = nodes_key();
  std::string id = node_id_text(node_);
  id.pop_back();  // (its '.')
  return {{"ZADD", key, std::to_string(now_ms), std::move(id)},
          {"ZREMRANGEBYSCORE", key, "-inf", "(" + std::to_string(now_ms - ttl_ms)},
          {"PEXPIRE", key, std::to_string(ttl_ms)},
          {"ZCARD", key}};
}

Command StoreLayout::log_command(const StoreWrite& write) const {
  // A write's own number, so that its members are new even when another of this node's
  // writes has the same expiry. It starts at random (48 bits), so that two processes whose
  // node ids collide (1 in 2^32 for a pair) still write members of their own.
  static std::atomic<std::uint64_t> writes{
      (std::random_device()() | (std::uint64_t{std::random_device()()} << 32)) >> 16};
  const std::int64_t now_us = write.epoch / 1000;
  const std::int64_t expiry_us = (write.expiry + 999) / 1000;
  // Entries are kept a window after they leave (see log_script), and so is the key.
  const std::int64_t keep_us = expiry_us - now_us;
  const std::int64_t ttl_ms = (2 * (write.expiry - write.epoch) + 999'999) / 1'000'000 + 1;
  std::string prefix = node_id_text(node_);
  prefix += std::to_string(writes.fetch_add(1, std::memory_order_relaxed));
  prefix += ':';
  return {"EVALSHA",
          log_script_sha(),
          "1",
          window_key(write.key),
          "a",
          std::to_string(now_us),
          std::to_string(expiry_us),
          std::to_string(write.cost),
          std::to_string(write.max),
          std::to_string(ttl_ms > 0 ? ttl_ms : 1),
          std::move(prefix),
          std::to_string(keep_us > 0 ? keep_us : 0)};
}

Command StoreLayout::log_give_back_command(const StoreWrite& give_back) const {
  return {"EVALSHA",
          log_script_sha(),
          "1",
          window_key(give_back.key),
          "r",
          std::to_string((give_back.expiry + 999) / 1000),
          std::to_string(give_back.cost),
          node_id_text(node_)};
}

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

Command StoreLayout::script_command(const StoreWrite& write, bool give_back) const {
  if (write.key.log()) return give_back ? log_give_back_command(write) : log_command(write);
  const auto cost = static_cast<std::int64_t>(write.cost);
  return bucket_command(write.key, write.epoch, write.emission, write.tolerance,
                        give_back ? -cost : cost);
}

bool StoreLayout::load_instead(Command& command, std::string_view error) {
  if (!error.starts_with("NOSCRIPT") || command.size() < 2 || command[0] != "EVALSHA")
    return false;
  if (command[1] == bucket_script_sha()) {
    command[1] = bucket_script();
  } else if (command[1] == log_script_sha()) {
    command[1] = log_script();
  } else {
    return false;
  }
  command[0] = "EVAL";
  return true;
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

std::string StoreLayout::change_set_key(std::uint32_t resolution_ms, std::uint32_t subintervals,
                                        unsigned shard, std::int64_t epoch) const {
  std::string out = prefix_;
  out += ":cs:{";
  out += shard_tags()[shard];
  out += "}:";
  out += geometry(resolution_ms, subintervals);
  out += ':';
  out += std::to_string(epoch);
  return out;
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
  // The next epoch's count, if another node has begun it (its clock a little ahead, across
  // a boundary): counted as this one's, so that a node behind never admits past it (it errs
  // high, by what was written in the moment the two disagreed).
  if (!counts.empty()) {
    const std::size_t at = std::size_t{slot_of(epoch + 1, subintervals)} * kSlotBytes;
    if (at + kSlotBytes <= value.size() &&
        big_endian(value, at, 2) == tag_of(epoch + 1, subintervals)) {
      counts[0] += big_endian(value, at + 2, 4);
    }
  }
}

namespace {

// The two saturating additions that leave max(slot, tag x 2^32) in the slot of `epoch`.
void append_claim(Command& bitfield, std::uint32_t slot, std::uint16_t tag) {
  const std::int64_t claimed = std::int64_t{tag} << 32;
  bitfield.insert(bitfield.end(), {"INCRBY", "u48", marked('#', slot), std::to_string(-claimed),
                                   "INCRBY", "u48", marked('#', slot), std::to_string(claimed)});
}

}  // namespace

std::vector<Command> StoreLayout::write_commands(const Write& w) const {
  const std::string key = window_key(w.key);
  if (w.cost == 0) return {{"GET", key}};
  const std::uint32_t n = w.key.subintervals;
  const std::uint32_t s = slot_of(w.epoch, n);
  Command bitfield = {"BITFIELD", key, "OVERFLOW", "SAT"};
  if (w.first) {
    append_claim(bitfield, s, tag_of(w.epoch, n));
    // Adding 0 to the ring's last byte changes nothing, but makes a new key the ring's
    // whole size at once: a string that BITFIELD grows later is given twice the room.
    bitfield.insert(bitfield.end(),
                    {"INCRBY", "u8", marked('#', ring_slots(n) * kSlotBytes - 1), "0"});
  }
  bitfield.insert(bitfield.end(), {"INCRBY", "u32", count_field(s), std::to_string(w.cost)});
  std::vector<Command> out = {std::move(bitfield),
                              {"GETEX", key, "PX", std::to_string(ttl_ms(w.key))}};
  if (w.first) {
    const unsigned shard = change_set_shard(w.key.resource);
    std::string cs = change_set_key(w.key.resolution_ms, n, shard, w.epoch);
    std::string entry(kChangeEntryBytes, '\0');
    for (std::size_t i = 0; i < 8; ++i)
      entry[i] = static_cast<char>((w.key.resource >> (8 * i)) & 0xff);
    for (std::size_t i = 0; i < 4; ++i) entry[8 + i] = static_cast<char>((node_ >> (8 * i)) & 0xff);
    out.push_back({"APPEND", cs, std::move(entry)});
    // Every time, though the time is the same: a change set that expired and that a late
    // APPEND makes again must not be left without an expiry.
    out.push_back({"PEXPIREAT", std::move(cs),
                   std::to_string(change_set_expiry_ms(w.key.resolution_ms, w.epoch))});
  }
  return out;
}

std::vector<Command> StoreLayout::give_back_commands(const LimiterKey& key, std::int64_t epoch,
                                                     std::uint64_t cost) const {
  const std::uint32_t s = slot_of(epoch, key.subintervals);
  const std::string k = window_key(key);
  return {{"BITFIELD", k, "GET", "u16", tag_field(s), "OVERFLOW", "FAIL", "INCRBY", "u32",
           count_field(s), std::to_string(-static_cast<std::int64_t>(cost))},
          {"PEXPIRE", k, std::to_string(ttl_ms(key))}};
}

std::vector<Command> StoreLayout::adjust_commands(const LimiterKey& key, std::int64_t epoch,
                                                  std::int64_t delta, std::uint16_t tag) const {
  const std::uint32_t s = slot_of(epoch, key.subintervals);
  const std::string k = window_key(key);
  Command bitfield = {"BITFIELD", k};
  if (tag != 0) bitfield.insert(bitfield.end(), {"SET", "u16", tag_field(s), std::to_string(tag)});
  bitfield.insert(bitfield.end(),
                  {"OVERFLOW", "SAT", "INCRBY", "u32", count_field(s), std::to_string(delta)});
  return {std::move(bitfield), {"PEXPIRE", k, std::to_string(ttl_ms(key))}};
}

}  // namespace ratewin::inline v1::detail
