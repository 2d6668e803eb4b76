// The Redis store's layout: the ring's arithmetic and encoding (no server), and the ring
// that native commands keep in a real Redis against an exact model on random traces.
#include "redis/layout.h"
#include "redis/slot.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>

#include "redis/reporter.h"
#include "redis/topology.h"
#include "redis/write_path.h"
#include "redis_server.h"
#include "resp_commands.h"

namespace ratewin::test {
namespace {

using detail::LimiterKey;
using detail::StoreLayout;
using detail::key_slot;
using namespace std::chrono_literals;
using Command = std::vector<std::string>;

// The commands a layout writes for a ring's write.
std::vector<Command> write_commands(const StoreLayout& layout, const LimiterKey& key,
                                    std::int64_t epoch, std::uint64_t cost, bool first) {
  detail::RespWriter out;
  layout.append_write({key, epoch, cost, first}, out);
  return commands_of(out.bytes());
}

// A window string with the given (slot -> tag, count).
std::string ring(std::uint32_t slots, const std::map<std::uint32_t, std::pair<int, long>>& set) {
  std::string out(std::size_t{slots} * StoreLayout::kSlotBytes, '\0');
  for (const auto& [slot, value] : set) {
    const std::size_t at = std::size_t{slot} * StoreLayout::kSlotBytes;
    out[at] = static_cast<char>(value.first >> 8);
    out[at + 1] = static_cast<char>(value.first & 0xff);
    for (int i = 0; i < 4; ++i)
      out[at + 2 + static_cast<std::size_t>(i)] =
          static_cast<char>((value.second >> (24 - 8 * i)) & 0xff);
  }
  return out;
}

}  // namespace

TEST_CASE("the ring: slots, lap tags, and decoding only what is tagged for its epoch") {
  CHECK(StoreLayout::ring_slots(12) == 15);
  CHECK(StoreLayout::slot_of(30, 12) == 0);
  CHECK(StoreLayout::slot_of(-1, 12) == 14);
  // A tag names a lap of the ring: the M epochs of a lap share it, the next lap's is one
  // more, and tags wrap from 65535 to 1 (0: never written).
  CHECK(StoreLayout::tag_of(0, 12) == 1);
  CHECK(StoreLayout::tag_of(14, 12) == 1);
  CHECK(StoreLayout::tag_of(15, 12) == 2);
  CHECK(StoreLayout::tag_of(15 * 65534, 12) == 65535);
  CHECK(StoreLayout::tag_of(15 * 65535, 12) == 1);
  CHECK(StoreLayout::tag_of(-1, 12) == 65535);
  CHECK(StoreLayout::earlier(0, 1));
  CHECK(StoreLayout::earlier(4, 5));
  CHECK(StoreLayout::earlier(65535, 1));  // around the wrap
  CHECK_FALSE(StoreLayout::earlier(5, 5));
  CHECK_FALSE(StoreLayout::earlier(6, 5));
  CHECK_FALSE(StoreLayout::earlier(1, 65535));
  CHECK_FALSE(StoreLayout::earlier(1, 0));
  // Any ring size, up to the largest a limit allows.
  for (const std::uint32_t n : {1U, 12U, 32767U, 65535U}) {
    const std::uint32_t m = StoreLayout::ring_slots(n);
    const std::int64_t e = 1'764'000'000;
    CHECK(StoreLayout::tag_of(e + m, n) != StoreLayout::tag_of(e, n));
    CHECK(StoreLayout::earlier(StoreLayout::tag_of(e - m, n), StoreLayout::tag_of(e, n)));
    CHECK_FALSE(StoreLayout::earlier(StoreLayout::tag_of(e + m, n), StoreLayout::tag_of(e, n)));
  }

  // N = 3, M = 6: epochs 96..101 make lap 16 (tag 17), 102.. lap 17. At epoch 102 (slot 0
  // of lap 17): 101 in slot 5, 100 in slot 4, 99 in slot 3 (lap 16).
  const std::int64_t e = 102;
  CHECK(StoreLayout::tag_of(e, 3) == 18);
  const std::string value = ring(6, {{0, {18, 7}},
                                     {5, {17, 5}},
                                     {4, {11, 9}},  // a stale count: an earlier lap's
                                     {3, {17, 70000}}});
  std::vector<std::uint64_t> counts(4);
  StoreLayout::decode(value, e, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{7, 5, 0, 70000});
  CHECK(StoreLayout::next_count(value, e, 3) == 0);  // 103 not begun
  // As of epoch 101, by a node a moment behind one that has begun 102: each epoch's own
  // count, and 102's apart (the decision adds it to 101's; the local window must not).
  StoreLayout::decode(value, e - 1, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{5, 0, 70000, 0});
  CHECK(StoreLayout::next_count(value, e - 1, 3) == 7);
  CHECK(StoreLayout::next_count(value, e - 3, 3) == 0);  // 100's slot holds an earlier lap
  // A shorter string (slots never written) and no string at all.
  StoreLayout::decode(value.substr(0, 4 * StoreLayout::kSlotBytes), e, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{7, 0, 0, 70000});
  StoreLayout::decode("", e, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{0, 0, 0, 0});
}

TEST_CASE("key names, change-set entries and the commands of a write") {
  const StoreLayout layout("app", 0x01020304);
  const LimiterKey key{0x1234abcd, 250, 4};
  CHECK(layout.window_key(key) == "app:{000000001234abcd}:250x4:w");
  // A shard's change sets hash to a slot among those of the windows it names.
  for (unsigned shard = 0; shard < StoreLayout::kChangeSetShards; ++shard) {
    const std::string cs = layout.change_set_key(250, 4, shard, 777);
    CHECK(cs.starts_with("app:cs:{"));
    CHECK(cs.ends_with("}:250x4:777"));
    CHECK((key_slot(cs) >> 8) == shard);
    CHECK(StoreLayout::change_set_slot(shard) == key_slot(cs));
  }
  CHECK(StoreLayout::change_set_shard(key.resource) == (key_slot(layout.window_key(key)) >> 8));
  CHECK(StoreLayout::change_set_expiry_ms(250, 777) == 779 * 250);

  // Small resources spread over the shards.
  std::set<unsigned> shards;
  for (std::uint64_t r = 0; r < 1000; ++r) shards.insert(StoreLayout::change_set_shard(r));
  CHECK(shards.size() == StoreLayout::kChangeSetShards);

  // Epoch 777 with M = 7: slot 0, lap 111, tag 112.
  const std::string claim = std::to_string(std::int64_t{112} << 32);
  const auto first = write_commands(layout, key, 777, 3, true);
  REQUIRE(first.size() == 4);
  CHECK(first[0] == Command{"BITFIELD", layout.window_key(key),
                                    "OVERFLOW", "SAT",
                                    "INCRBY",   "u48",
                                    "#0",       "-" + claim,
                                    "INCRBY",   "u48",
                                    "#0",       claim,
                                    "INCRBY",   "u8",
                                    "#41",      "0",  // the ring's size
                                    "INCRBY",   "u32",
                                    "16",       "3",
                                    // 776's slot and 778's, read with the count
                                    "GET",      "u48",
                                    "#6",       "GET",
                                    "u48",      "#1"});
  CHECK(first[1] == Command{"GETEX", layout.window_key(key), "PX", "1750"});
  CHECK(first[2][0] == "APPEND");
  CHECK(first[3] == Command{"PEXPIREAT", first[2][1], "194750"});
  // The entry names the resource and this node, and a reader finds it unless it wrote it.
  std::vector<std::uint64_t> found;
  layout.others_in_change_set(first[2][2], [&](std::uint64_t r) { found.push_back(r); });
  CHECK(found.empty());
  StoreLayout("app", 99).others_in_change_set(first[2][2] + first[2][2],
                                              [&](std::uint64_t r) { found.push_back(r); });
  CHECK(found == std::vector<std::uint64_t>{0x1234abcd, 0x1234abcd});

  const auto hot = write_commands(layout, key, 778, 2, false);
  REQUIRE(hot.size() == 2);
  CHECK(hot[0] == Command{"BITFIELD", layout.window_key(key), "OVERFLOW", "SAT", "INCRBY",
                                  "u32", "64", "2", "GET", "u48", "#0", "GET", "u48", "#2"});
  // A slot read whole: its count for an epoch only under that epoch's tag.
  CHECK(StoreLayout::slot_count((std::int64_t{112} << 32) + 9, 777, 4) == 9);
  CHECK(StoreLayout::slot_count((std::int64_t{112} << 32) + 9, 777 + 7, 4) == 0);
  CHECK(StoreLayout::slot_count(9, 777, 4) == 0);
  CHECK(write_commands(layout, key, 778, 0, false) ==
        std::vector<Command>{{"GET", layout.window_key(key)}});
}

namespace {

// The pieces of a store's write path, on one Redis.
struct Writers {
  Options options;
  detail::Reporter reporter{[](LogLevel, std::string_view) {}, "test"};
  std::unique_ptr<detail::Topology> topology;
  std::vector<std::unique_ptr<detail::StoreLayout>> layouts;
  std::vector<std::unique_ptr<detail::WritePath>> nodes;

  Writers(const RedisServer& redis, int count) {
    options.redis = redis.url();
    options.key_prefix = "trace";
    options.command_timeout = 1s;
    options.connect_timeout = 1s;
    options.max_connections = 4;
    topology = std::make_unique<detail::Topology>(detail::RedisAddress::parse(options.redis),
                                                  options, reporter, nullptr);
    for (int i = 0; i < count; ++i) {
      layouts.push_back(std::make_unique<detail::StoreLayout>(
          options.key_prefix, 100U + static_cast<std::uint32_t>(i)));
      nodes.push_back(
          std::make_unique<detail::WritePath>(options, *layouts.back(), *topology, reporter));
    }
  }
  // What Redis holds for the window of `key` as of `epoch`.
  std::vector<std::uint64_t> read(const RedisServer& redis, const LimiterKey& key,
                                  std::int64_t epoch) const {
    std::vector<std::uint64_t> counts(std::size_t{key.subintervals} + 1);
    const std::string value = redis.command({"GET", layouts[0]->window_key(key)});
    StoreLayout::decode(value == "(nil)" ? "" : value, epoch, key.subintervals, counts);
    return counts;
  }
  // Sends a write's commands as a node whose call timed out would have: they reach Redis,
  // nobody reads the replies, nothing follows them.
  void send_unread(const RedisServer& redis, const LimiterKey& key, std::int64_t epoch,
                   std::uint64_t cost, bool first) const {
    for (const auto& command : write_commands(*layouts[0], key, epoch, cost, first))
      redis.command(command);
  }
};

}  // namespace

// Several nodes write one Redis through the store's write path, in random order: first and
// later writes, questions, gives-back, writes for earlier epochs of the window (a node
// behind, a write that arrives late), commands whose sender timed out (sent, never read,
// never followed up), and gaps, short and longer than the ring, after which a slot still
// holds an old lap's count. After every call the window read back from Redis must hold
// exactly what an exact model of the counts says, for every epoch of the window, and so
// must what the write returned.
TEST_CASE("the ring native commands keep in Redis matches an exact model on random traces") {
  RedisServer redis;
  std::mt19937_64 rng(20261124);
  auto pick = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
  };
  for (const std::uint32_t n : {1U, 3U, 12U}) {
    constexpr int kNodes = 3;
    Writers writers(redis, kNodes);
    const LimiterKey key{0xfeedULL + n, 60'000, n};  // a minute's subintervals: no expiry here
    std::map<std::int64_t, std::uint64_t> model;     // epoch -> exact shared count
    std::map<std::pair<int, std::int64_t>, bool> written;  // (node, epoch) -> wrote then
    std::int64_t now = 1'000'000;
    int checks = 0;
    for (int step = 0; step < 1500; ++step) {
      const std::uint64_t move = pick(20);
      if (move < 4) {
        now += 1;
      } else if (move == 4) {
        now += static_cast<std::int64_t>(1 + pick(3 * n + 6));  // a gap, maybe past the ring
      }
      const int node = static_cast<int>(pick(kNodes));
      auto& path = *writers.nodes[static_cast<std::size_t>(node)];
      // Mostly the current epoch; sometimes an earlier one still in the window.
      const std::int64_t epoch = now - (pick(5) == 0 ? static_cast<std::int64_t>(pick(n + 1)) : 0);
      const std::uint64_t kind = pick(12);
      std::vector<std::uint64_t> counts(std::size_t{n} + 2);  // (RingReply)
      bool& wrote = written[{node, epoch}];
      if (kind == 0 && model[epoch] > 0) {
        const std::uint64_t cost = 1 + pick(std::min<std::uint64_t>(model[epoch], 3));
        path.remove({key, epoch, cost, false});
        model[epoch] -= cost;
      } else if (kind == 1) {
        // A timed-out write: its first write's claim, or a later write of a node that
        // claimed the epoch before.
        const std::uint64_t cost = 1 + pick(4);
        writers.send_unread(redis, key, epoch, cost, !wrote);
        wrote = true;
        model[epoch] += cost;
      } else {
        const std::uint64_t cost = kind == 2 ? 0 : 1 + pick(4);
        const bool first = cost != 0 && !wrote;
        const bool added = path.add({key, epoch, cost, first}, counts);
        INFO(writers.reporter.last_error());
        REQUIRE(added);
        if (cost != 0) wrote = true;
        model[epoch] += cost;
        // What the write returned: the window as of its epoch, as far as the ring still
        // holds it (epochs more than N before the newest have left it), and apart, the
        // next epoch's count (a write behind the newest epoch).
        CHECK(counts[n + 1] == model[epoch + 1]);
        for (std::uint32_t k = 0; k <= n; ++k) {
          const std::int64_t x = epoch - static_cast<std::int64_t>(k);
          const std::uint64_t expected = model[x];
          if (x >= now - static_cast<std::int64_t>(n) && counts[k] != expected) {
            FAIL_CHECK("write at epoch " << epoch << " (now " << now << ", n " << n << "): epoch "
                                         << x << " reads " << counts[k] << ", model " << expected);
          }
        }
      }
      // What Redis holds, as of now.
      counts = writers.read(redis, key, now);
      for (std::uint32_t k = 0; k <= n; ++k) {
        const std::int64_t x = now - static_cast<std::int64_t>(k);
        ++checks;
        if (counts[k] != model[x]) {
          FAIL_CHECK("step " << step << " (n " << n << "): epoch " << x << " holds " << counts[k]
                             << ", model " << model[x]);
        }
      }
    }
    MESSAGE("n = " << n << ": 1500 operations, " << checks << " counts checked");
  }
}

// Commands that reach Redis a lap or more late (a server stalled that long, their senders
// gone) can make a count err high, never low.
TEST_CASE("commands a whole ring late never take counts away") {
  RedisServer redis;
  std::mt19937_64 rng(7);
  auto pick = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
  };
  constexpr std::uint32_t n = 4;
  const std::int64_t m = StoreLayout::ring_slots(n);
  Writers writers(redis, 2);
  const LimiterKey key{0xbeef, 60'000, n};
  std::map<std::int64_t, std::uint64_t> model;
  std::map<std::int64_t, bool> claimed;
  std::int64_t now = 5'000'000;
  std::vector<std::uint64_t> counts(n + 2);  // (RingReply)
  for (int step = 0; step < 800; ++step) {
    if (pick(4) == 0) ++now;
    const std::uint64_t cost = 1 + pick(3);
    REQUIRE(writers.nodes[0]->add({key, now, cost, !claimed[now]}, counts));
    claimed[now] = true;
    model[now] += cost;
    if (pick(3) == 0) {
      // From one to three laps late: a claim and an addition, or a give-back.
      const std::int64_t late = now - m * static_cast<std::int64_t>(1 + pick(3)) -
                                static_cast<std::int64_t>(pick(static_cast<std::uint64_t>(m)));
      if (pick(2) == 0) {
        writers.send_unread(redis, key, late, 1 + pick(3), true);
      } else {
        writers.nodes[1]->remove({key, late, 1 + pick(3), false});
      }
    }
    const std::vector<std::uint64_t> held = writers.read(redis, key, now);
    for (std::uint32_t k = 0; k <= n; ++k) {
      const std::int64_t x = now - static_cast<std::int64_t>(k);
      if (held[k] < model[x]) {
        FAIL_CHECK("step " << step << ": epoch " << x << " holds " << held[k] << ", at least "
                           << model[x] << " were counted");
      }
    }
  }
}

TEST_CASE("a claim finds the tag wrapped: the writer tags the slot, keeping the count") {
  RedisServer redis;
  Writers writers(redis, 1);
  constexpr std::uint32_t n = 2;
  const std::int64_t m = StoreLayout::ring_slots(n);
  const LimiterKey key{0xabc, 60'000, n};
  // The last lap before the wrap (tag 65535), then the first after it (tag 1).
  const std::int64_t before = 65534 * m;
  const std::int64_t after = 65535 * m;
  REQUIRE(StoreLayout::tag_of(before, n) == 65535);
  REQUIRE(StoreLayout::tag_of(after, n) == 1);
  std::vector<std::uint64_t> counts(n + 2);  // (RingReply)
  REQUIRE(writers.nodes[0]->add({key, before, 4, true}, counts));
  CHECK(counts[0] == 4);
  REQUIRE(writers.nodes[0]->add({key, after, 2, true}, counts));
  // The old lap's 4 stay in the count (it errs high for this epoch), but the slot is e's.
  CHECK(counts[0] == 6);
  CHECK(writers.read(redis, key, after)[0] == 6);
  CHECK(writers.nodes[0]->repairs() == 1);
}

}  // namespace ratewin::test
