// What the Redis store keeps in Redis and how: key names, the encoding of a limiter's
// shared window, the change sets, and the commands that write and read them. Pure: no
// I/O, so that it is tested without a server and the benchmark's baseline sends the very
// commands the store sends.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/record.h"
#include "engine/store.h"
#include "redis/resp.h"

namespace ratewin {
inline namespace v1 {
namespace detail {

// `mark` followed by `n` in decimal ("#12", "*3", "$40"): built by appending, as
// "#" + std::to_string(n) makes GCC 12 at -O3 warn (-Wrestrict, a false positive,
// GCC bug 105329).
inline std::string marked(char mark, std::uint64_t n) {
  std::string out(1, mark);
  out += std::to_string(n);
  return out;
}

// The shared window of one limiter (a resource under one window geometry) is one string,
//
//     <prefix>:{<resource as 16 hex digits>}:<resolution ms>x<N>:w
//
// a ring of M = N + 3 slots of 6 bytes: slot s, at byte 6s, is a 16-bit tag followed by a
// 32-bit count, both big-endian as BITFIELD reads them. Epoch e lives in slot e mod M, in
// lap floor(e / M), and the slot counts for e only while its tag is the tag of that lap,
// tag(e) = floor(e / M) mod 65535 + 1 (0: a slot never written). Read as one unsigned
// 48-bit number, a slot is tag x 2^32 + count, so a later lap's slot is a larger number
// (but once every 65535 laps, when the tag wraps). The hash tag {...} keeps every key of
// a resource in one Redis Cluster slot; the geometry keeps limits of other intervals or
// resolutions apart.
//
// Writes are native commands (BITFIELD, GETEX), not scripts, so nothing in Redis
// decides: a node adds its cost, reads the window back in the same round trip, and
// decides from it with the engine's own arithmetic. It decides from the window as of its
// own addition, in Redis' order of every node's writes: the count of e that the BITFIELD
// returns, and the slots of e - 1 and e + 1 that the same command reads (the epochs that
// nodes write to around a boundary); only the older epochs, which no node writes to any
// more, come from the GETEX after it. Redis runs other clients' commands between two of
// one pipeline whenever the pipeline reaches it in two reads (a long one, or a slow
// sender): a GETEX may then read writes made after this one, and two writes that took the
// last unit each saw the other's, and both refused (a cold burst over two engines admitted
// 149 of 150). The ring stays right without a compare-and-set:
// - A node's first write to a window in epoch e (Write::first) claims e's slot before
//   adding to it: two saturating additions, -tag(e) x 2^32 then +tag(e) x 2^32, leave
//   max(slot, tag(e) x 2^32). A slot still holding an older lap (or never written)
//   becomes tag(e) with count 0; a slot already claimed for e, or for a later lap, is
//   left alone. So a stale count is never read as e's, and a claim that reaches Redis
//   late (a stalled server, a slow network, its sender long gone) can destroy nothing.
//   The slot claimed for e held epoch e - M = e - N - 3: out of every window, even one a
//   node one epoch behind still reads.
// - Every other write only adds to e's count: a late one adds to the epoch it was meant
//   for, or, a whole lap late, to that slot's later epoch (the count errs high).
// - Once every 65535 laps the tag wraps to a smaller number, and a claim finds the old
//   lap's larger tag in place: its sender sees that in the reply and tags the slot in a
//   second command, keeping the old count, which then errs high for one epoch.
// - Every write refreshes the expiry, (N + 3) x resolution, in the GETEX that reads the
//   window back, and a give-back sends a PEXPIRE: a key outlives the last window that can
//   read it, and a key that a late command makes again is not left without one. A new key
//   is made at the ring's full size at once (BITFIELD gives a string it grows twice the
//   room).
//
// Change sets: the first write of a node to a window in epoch e also appends 12 bytes
// (the resource, little-endian, and the node's id) to
//
//     <prefix>:cs:{<shard tag>}:<resolution ms>x<N>:<e>
//
// one of kChangeSetShards strings per geometry and epoch, picked by the Cluster slot of
// the resource's window (slot / 256), so that no key or slot takes every write. A shard's
// tag hashes to a slot among those of the windows it names: on a cluster whose primaries
// serve ranges of slots (as `redis-cli --cluster` makes them), the change set lives on
// the window's node, and a first write still goes to one node. It sets its expiry with
// it: the start of
// epoch e + 2 (absolute, so every node sets the same time), after the boundary read that
// needs it (at the start of e + 1, plus the settle delay). A read that comes later (a
// retry after a failure) reads every active window instead. At a boundary, a node reads
// the change sets of the epoch that closed (only the shards where it has active
// limiters) and then only the windows that other nodes wrote.
//
// A token bucket (LimiterKey::bucket) is one string too,
//
//     <prefix>:{<resource as 16 hex digits>}:tb
//
// of 8 bytes: its TAT's seconds and nanoseconds (Unix time, on the shared clock), each a
// big-endian u32, expiring when the bucket is full again. A Lua script (bucket_script(),
// sent by EVALSHA; see bucket_command) decides and counts atomically: the TAT is a
// compare-and-set, which native commands cannot do in one round trip. Its arithmetic is
// on times relative to the caller's second, so that Lua's doubles hold every value
// exactly (a bucket refills in at most 2^32 ms, well under 2^53 ns).
class StoreLayout {
 public:
  static constexpr std::uint32_t kSlotBytes = 6;
  static constexpr unsigned kChangeSetShards = 64;
  static constexpr std::size_t kChangeEntryBytes = 12;

  // `node`: this engine's id in the change sets (random: see RedisStore).
  StoreLayout(std::string prefix, std::uint32_t node);

  const std::string& prefix() const noexcept { return prefix_; }
  std::uint32_t node() const noexcept { return node_; }

  std::string window_key(const LimiterKey& key) const;
  std::string change_set_key(std::uint32_t resolution_ms, std::uint32_t subintervals,
                             unsigned shard, std::int64_t epoch) const;

  // The ring's geometry.
  static std::uint32_t ring_slots(std::uint32_t subintervals) noexcept { return subintervals + 3; }
  static std::uint32_t slot_of(std::int64_t epoch, std::uint32_t subintervals) noexcept;
  static std::uint16_t tag_of(std::int64_t epoch, std::uint32_t subintervals) noexcept;
  // Whether a slot tagged `tag` holds an earlier lap than `than` (tags are compared around
  // their wrap: within half of it). 0 is earlier than every tag.
  static bool earlier(std::uint16_t tag, std::uint16_t than) noexcept;
  // Expiry of a window key, refreshed by every write: (N + 3) x resolution.
  static std::int64_t ttl_ms(const LimiterKey& key) noexcept;
  // Which change set a resource's writes go to: its window's Cluster slot / 256.
  static unsigned change_set_shard(std::uint64_t resource) noexcept;
  // The Cluster slot of a shard's change sets.
  static std::uint16_t change_set_slot(unsigned shard);
  // When the change sets of `epoch` expire (Unix time, ms).
  static std::int64_t change_set_expiry_ms(std::uint32_t resolution_ms,
                                           std::int64_t epoch) noexcept;

  // The shared counts of epochs epoch, epoch - 1, ..., epoch - N (counts.size() of them,
  // at most N + 1) in a window string (empty: no key); a slot tagged for another epoch
  // counts 0.
  static void decode(std::string_view value, std::int64_t epoch, std::uint32_t subintervals,
                     std::span<std::uint64_t> counts) noexcept;
  // The count a slot read as one 48-bit number (a BITFIELD GET u48) holds for `epoch`: 0
  // unless it carries epoch's tag.
  static std::uint64_t slot_count(std::int64_t slot, std::int64_t epoch,
                                  std::uint32_t subintervals) noexcept;
  // The count of epoch + 1 in a window string, if some node has begun it (its clock
  // slightly ahead at a boundary; RingReply::ahead), else 0.
  static std::uint64_t next_count(std::string_view value, std::int64_t epoch,
                                  std::uint32_t subintervals) noexcept;
  // The tag and count of the slot of `epoch` in a window string (0, 0 if not there).
  static std::pair<std::uint16_t, std::uint32_t> slot_value(std::string_view value,
                                                            std::int64_t epoch,
                                                            std::uint32_t subintervals) noexcept;

  // Commands are written straight into a RespWriter (RESP, once), as one pipeline. A
  // script command names its script by its SHA-1 (EVALSHA), or by its text (EVAL, which
  // also loads it) after Redis answered that it does not hold it (NOSCRIPT: after SCRIPT
  // FLUSH, a restart, a failover, or on a node not used before).
  enum class Script { sha, text };

  // The commands of one write (see WritePath):
  // - a ring's (key.ring()):
  //     BITFIELD <window> OVERFLOW SAT [INCRBY u48 <slot of e> -tag(e)<<32
  //                                     INCRBY u48 <slot of e> +tag(e)<<32
  //                                     INCRBY u8 <the ring's last byte> 0]
  //                       INCRBY u32 <count of e> <cost>
  //                       GET u48 <slot of e - 1>  GET u48 <slot of e + 1>
  //     GETEX <window> PX <ttl>
  //     [APPEND <change set> <entry>  PEXPIREAT <change set> <expiry>]
  //   the bracketed parts on a first write (write.first, with a cost); cost 0 reads only:
  //   GET <window>;
  // - a token bucket's: EVALSHA <bucket_script_sha> 1 <key> <epoch's seconds> <its
  //   nanoseconds> <emission> <tolerance> <cost>. Its reply is one integer: the TAT after
  //   it minus epoch if it counted (cost 0: read only), -1 minus that if it did not fit
  //   (bucket_reply);
  // - a sliding log's, on its sorted set <prefix>:{<resource>}:log, whose members are
  //   entries (this node's id, a number of the write's own and the unit's) scored by their
  //   expiry in whole microseconds (rounded up: an entry leaves no earlier than it does
  //   here), all in the resource's slot:
  //     EVALSHA <log_script_sha> 1 <key> a <now, us> <expiry, us> <cost> <max> <ttl, ms>
  //             <member prefix> <keep, us>
  //   counts the entries live at now (those that left are dropped `keep` later, one
  //   window: a write decided earlier may reach Redis after this one), adds the cost's
  //   entries if they fit, and replies the count after them if they did and the log is
  //   not full (the common case, kept cheap), else [admitted, count, us until the oldest
  //   leaves, us until the cost fits (a refusal's)], relative to now (log_reply).
  void append_write(const StoreWrite& write, RespWriter& out, Script script = Script::sha) const;
  // The commands of a give-back (Store::remove):
  // - a ring's takes back `cost` from the count of `epoch` (never below 0), reading the
  //   slot's tag in the same command, and refreshes the key's expiry:
  //     BITFIELD <window> GET u16 <tag> OVERFLOW FAIL INCRBY u32 <count> -cost
  //     PEXPIRE <window> <ttl>
  // - a bucket's: its write's command with -cost;
  // - a log's: EVALSHA <log_script_sha> 1 <key> r <expiry, us> <count> <this node's id>
  //   takes back up to count of this node's entries of that expiry.
  void append_give_back(const StoreWrite& give_back, RespWriter& out,
                        Script script = Script::sha) const;
  // BITFIELD <window> OVERFLOW SAT INCRBY u32 <count of epoch> <delta> (delta may be < 0),
  // optionally setting the slot's tag first (`tag` != 0), then PEXPIRE <window> <ttl>.
  void append_adjust(const LimiterKey& key, std::int64_t epoch, std::int64_t delta,
                     std::uint16_t tag, RespWriter& out) const;
  // A change set's key, as one argument of a command begun in `out`.
  void append_change_set_key(std::uint32_t resolution_ms, std::uint32_t subintervals,
                             unsigned shard, std::int64_t epoch, RespWriter& out) const;
  // DEL <window>: a limiter's shared counts forgotten (Store::reset).
  void append_reset(const LimiterKey& key, RespWriter& out) const;
  // The window of `key`, as one argument of a command begun in `out`.
  void append_window_key(const LimiterKey& key, RespWriter& out) const;

  // The scripts and their SHA-1 (hex), as Redis names them.
  static const std::string& bucket_script();
  static const std::string& bucket_script_sha();
  static const std::string& log_script();
  static const std::string& log_script_sha();
  // What a bucket command's integer reply says, as BucketReply fills a write's counts.
  static void bucket_reply(long long reply, std::span<std::uint64_t> counts) noexcept;
  // What a log command's reply (its one or four integers) says, as LogReply fills the
  // counts of a write decided at `epoch` (ns).
  static void log_reply(std::span<const long long> reply, std::int64_t epoch,
                        std::span<std::uint64_t> counts) noexcept;

  // The live nodes of this prefix: a sorted set, in one Cluster slot,
  //
  //     <prefix>:{nodes}
  //
  // whose members are the engines' ids (8 hex digits), each scored by the time (ms, on
  // the shared clock) of its last heartbeat. A heartbeat is these commands, pipelined:
  // it scores this node at `now_ms`, drops the nodes silent for `ttl_ms`, keeps the key
  // as long, and its last command's reply (ZCARD) is the live count.
  std::string nodes_key() const { return prefix_ + ":{nodes}"; }
  void append_heartbeat(std::int64_t now_ms, std::int64_t ttl_ms, RespWriter& out) const;

  // A change set's entries that another node wrote: calls found(resource) for each.
  template <class Found>
  void others_in_change_set(std::string_view value, Found&& found) const {
    for (std::size_t at = 0; at + kChangeEntryBytes <= value.size(); at += kChangeEntryBytes) {
      std::uint64_t resource = 0;
      std::uint32_t writer = 0;
      for (int i = 7; i >= 0; --i)
        resource =
            (resource << 8) | static_cast<unsigned char>(value[at + static_cast<std::size_t>(i)]);
      for (int i = 3; i >= 0; --i)
        writer =
            (writer << 8) | static_cast<unsigned char>(value[at + 8 + static_cast<std::size_t>(i)]);
      if (writer != node_) found(resource);
    }
  }

 private:
  // A token bucket's command, counting `cost` (< 0: given back).
  void append_bucket(const StoreWrite& write, std::int64_t cost, RespWriter& out,
                     Script script) const;

  std::string prefix_;
  std::uint32_t node_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratewin
