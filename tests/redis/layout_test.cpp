// The Redis store's layout: the ring's arithmetic and encoding (no server), and the ring
// that native commands keep in a real Redis against an exact model on random traces.
#include "redis/layout.h"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>

#include "redis/circuit.h"
#include "redis/pool.h"
#include "redis/reporter.h"
#include "redis/write_path.h"
#include "redis_server.h"

namespace ratewin::test {
namespace {

using detail::LimiterKey;
using detail::StoreLayout;
using namespace std::chrono_literals;

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

TEST_CASE("the ring: slots, tags, and decoding only what is tagged for its epoch") {
  CHECK(StoreLayout::ring_slots(12) == 15);
  CHECK(StoreLayout::slot_of(30, 12) == 0);
  CHECK(StoreLayout::slot_of(-1, 12) == 14);
  CHECK(StoreLayout::tag_of(0) == 1);
  CHECK(StoreLayout::tag_of(65534) == 65535);
  CHECK(StoreLayout::tag_of(65535) == 1);  // tags repeat; 0 never names an epoch
  for (const std::int64_t e : {std::int64_t{0}, std::int64_t{17}, std::int64_t{1'764'000'000}}) {
    for (const std::int64_t d : {-32767, -20, -1, 0, 1, 2, 32767}) {
      CHECK(StoreLayout::epoch_of_tag(StoreLayout::tag_of(e + d), e) == e + d);
    }
  }

  // N = 3, M = 6. Epoch 100 in slot 4, 99 in slot 3, 98 in slot 2, 97 in slot 1.
  const std::int64_t e = 100;
  const std::string value =
      ring(6, {{4, {StoreLayout::tag_of(100), 7}},
               {3, {StoreLayout::tag_of(99), 5}},
               {2, {StoreLayout::tag_of(98 - 6), 9}},  // a stale count: another lap's
               {1, {StoreLayout::tag_of(97), 70000}}});
  std::vector<std::uint64_t> counts(4);
  StoreLayout::decode(value, e, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{7, 5, 0, 70000});
  // A shorter string (slots never written) and no string at all.
  StoreLayout::decode(value.substr(0, 4 * StoreLayout::kSlotBytes), e, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{0, 5, 0, 70000});
  StoreLayout::decode("", e, 3, counts);
  CHECK(counts == std::vector<std::uint64_t>{0, 0, 0, 0});
}

TEST_CASE("key names, change-set entries and the commands of a write") {
  const StoreLayout layout("app", 0x01020304);
  const LimiterKey key{0x1234abcd, 250, 4};
  CHECK(layout.window_key(key) == "app:{000000001234abcd}:250x4:w");
  CHECK(layout.change_set_key(250, 4, 10, 777) == "app:cs:{250x4:0a}:777");
  CHECK(StoreLayout::change_set_expiry_ms(250, 777) == 779 * 250);

  // Small resources spread over the shards.
  std::set<unsigned> shards;
  for (std::uint64_t r = 0; r < 1000; ++r) shards.insert(StoreLayout::change_set_shard(r));
  CHECK(shards.size() == StoreLayout::kChangeSetShards);

  const auto first = layout.write_commands({key, 777, 3, true, true});
  REQUIRE(first.size() == 4);
  CHECK(first[0] ==
        detail::Command{"BITFIELD", layout.window_key(key),
                        "SET",      "u48",
                        "#2",       std::to_string(std::uint64_t{StoreLayout::tag_of(779)} << 32),
                        "SET",      "u16",
                        "#0",       std::to_string(StoreLayout::tag_of(777)),
                        "INCRBY",   "u8",
                        "#41",      "0",  // the ring's size, 7 x 6 bytes
                        "OVERFLOW", "SAT",
                        "INCRBY",   "u32",
                        "16",       "3"});
  CHECK(first[1] == detail::Command{"GETEX", layout.window_key(key), "PX", "1750"});
  CHECK(first[2][0] == "APPEND");
  CHECK(first[3] == detail::Command{"PEXPIREAT", first[2][1], "194750"});
  // The entry names the resource and this node, and a reader finds it unless it wrote it.
  std::vector<std::uint64_t> found;
  layout.others_in_change_set(first[2][2], [&](std::uint64_t r) { found.push_back(r); });
  CHECK(found.empty());
  StoreLayout("app", 99).others_in_change_set(first[2][2] + first[2][2],
                                              [&](std::uint64_t r) { found.push_back(r); });
  CHECK(found == std::vector<std::uint64_t>{0x1234abcd, 0x1234abcd});

  const auto hot = layout.write_commands({key, 778, 2, false, false});
  REQUIRE(hot.size() == 2);
  CHECK(hot[0] == detail::Command{"BITFIELD", layout.window_key(key), "OVERFLOW", "SAT", "INCRBY",
                                  "u32", "64", "2"});
  CHECK(layout.write_commands({key, 778, 0, false, false}) ==
        std::vector<detail::Command>{{"GET", layout.window_key(key)}});
}

// Several nodes write one Redis through the store's write path, in random order: first and
// later writes, questions, gives-back, writes for earlier epochs of the window (a node
// behind, a write that arrives late), and gaps, short and longer than the ring, after which
// a slot still holds an old epoch's count. After every call the window read back from
// Redis must hold exactly what an exact model of the counts says, for every epoch of the
// window, and so must what the write returned.
TEST_CASE("the ring native commands keep in Redis matches an exact model on random traces") {
  RedisServer redis;
  Options options;
  options.redis = redis.url();
  options.key_prefix = "trace";
  options.command_timeout = 1s;
  options.connect_timeout = 1s;
  detail::Reporter reporter([](LogLevel, std::string_view) {}, "test");
  detail::CircuitBreaker circuit(reporter, nullptr);
  circuit.start(true, "");
  detail::RedisPool pool(detail::RedisEndpoint::parse(options.redis), options.connect_timeout,
                         options.command_timeout, 4);

  std::mt19937_64 rng(20261124);
  auto pick = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
  };
  for (const std::uint32_t n : {1U, 3U, 12U}) {
    constexpr int kNodes = 3;
    std::vector<std::unique_ptr<detail::StoreLayout>> layouts;
    std::vector<std::unique_ptr<detail::WritePath>> nodes;
    for (int i = 0; i < kNodes; ++i) {
      layouts.push_back(std::make_unique<detail::StoreLayout>(
          options.key_prefix, 100U + static_cast<std::uint32_t>(i)));
      nodes.push_back(
          std::make_unique<detail::WritePath>(options, *layouts.back(), pool, circuit, reporter));
    }
    const LimiterKey key{0xfeedULL + n, 60'000, n};  // a minute's subintervals: no expiry here
    std::map<std::int64_t, std::uint64_t> model;     // epoch -> exact shared count
    std::map<std::pair<int, std::int64_t>, bool> written;  // (node, epoch) -> wrote then
    std::int64_t now = 1'000'000;
    int steps = 0;
    int checks = 0;
    for (int step = 0; step < 1500; ++step, ++steps) {
      const std::uint64_t move = pick(20);
      if (move < 4) {
        now += 1;
      } else if (move == 4) {
        now += static_cast<std::int64_t>(1 + pick(3 * n + 6));  // a gap, maybe past the ring
      }
      const int node = static_cast<int>(pick(kNodes));
      // Mostly the current epoch; sometimes an earlier one still in the window.
      const std::int64_t epoch = now - (pick(5) == 0 ? static_cast<std::int64_t>(pick(n + 1)) : 0);
      const std::uint64_t kind = pick(10);
      std::vector<std::uint64_t> counts(std::size_t{n} + 1);
      if (kind == 0 && model[epoch] > 0) {
        const std::uint64_t cost = 1 + pick(std::min<std::uint64_t>(model[epoch], 3));
        nodes[static_cast<std::size_t>(node)]->remove(key, epoch, cost);
        model[epoch] -= cost;
      } else {
        const std::uint64_t cost = kind == 1 ? 0 : 1 + pick(4);
        bool& wrote = written[{node, epoch}];
        const bool first = cost != 0 && !wrote;
        REQUIRE(nodes[static_cast<std::size_t>(node)]->add({key, epoch, cost, first}, counts));
        if (cost != 0) wrote = true;
        model[epoch] += cost;
        // What the write returned: the window as of its epoch, as far as the ring still
        // holds it (epochs more than N before the newest have left it).
        for (std::uint32_t k = 0; k <= n; ++k) {
          const std::int64_t x = epoch - static_cast<std::int64_t>(k);
          if (x >= now - static_cast<std::int64_t>(n) && counts[k] != model[x]) {
            FAIL_CHECK("write at epoch " << epoch << " (now " << now << ", n " << n << "): epoch "
                                         << x << " reads " << counts[k] << ", model " << model[x]);
          }
        }
      }
      // What Redis holds, as of now.
      const std::string value = redis.command({"GET", layouts[0]->window_key(key)});
      detail::StoreLayout::decode(value == "(nil)" ? "" : value, now, n, counts);
      for (std::uint32_t k = 0; k <= n; ++k) {
        const std::int64_t x = now - static_cast<std::int64_t>(k);
        ++checks;
        if (counts[k] != model[x]) {
          FAIL_CHECK("step " << step << " (n " << n << "): epoch " << x << " holds " << counts[k]
                             << ", model " << model[x]);
        }
      }
    }
    std::uint64_t repairs = 0;
    for (const auto& node : nodes) repairs += node->repairs();
    MESSAGE("n = " << n << ": " << steps << " operations, " << checks << " counts checked, "
                   << repairs << " corrections");
    CHECK(repairs > 0);  // the trace did reach stale slots and late clearings
  }
}

}  // namespace ratewin::test
