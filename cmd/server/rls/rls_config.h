// rls_config.h: envoyproxy/ratelimit's configuration, read unchanged (a folder of YAML
// files, one domain each, of nested descriptors with rate limits), and the matching of a
// request's descriptor to the limit that counts it, as the reference service matches.
// Independent of gRPC: the protocol's front end (rls/) and the fuzz target share it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ratewin/limit.h"
#include "rules/rules.h"  // RulesError

namespace ratewin::server::rls {

// A rate limit's unit, numbered as the protocol numbers it.
enum class Unit : std::uint8_t {
  unknown = 0,
  second = 1,
  minute = 2,
  hour = 3,
  day = 4,
  month = 5,
  year = 6,
  week = 7,
};
// The window of a unit, as the reference counts it: a month is 30 days and a year 365
// (not calendar months or years). Zero for unknown.
std::chrono::seconds unit_length(Unit unit) noexcept;
// "second" ... "week" (any case, as the reference reads them); nullopt when none.
std::optional<Unit> parse_unit(std::string_view name) noexcept;
const char* unit_name(Unit unit) noexcept;  // "second", ...; "unknown"

// The counters the reference keeps per descriptor (its stats' names), in hits (a
// request's hits_addend), exported to Prometheus.
struct HitCounters {
  std::atomic<std::uint64_t> total_hits{0};
  std::atomic<std::uint64_t> over_limit{0};
  std::atomic<std::uint64_t> near_limit{0};  // within the limit, above 80% of it
  std::atomic<std::uint64_t> within_limit{0};
  std::atomic<std::uint64_t> shadow_mode{0};  // over the limit, let through by shadow_mode

  // Adds `hits`, stopping at the largest count instead of wrapping to 0 (a descriptor's
  // hits_addend may be 2^64 - 1).
  static void add(std::atomic<std::uint64_t>& counter, std::uint64_t hits) noexcept {
    std::uint64_t now = counter.load(std::memory_order_relaxed);
    while (!counter.compare_exchange_weak(
        now, now > UINT64_MAX - hits ? UINT64_MAX : now + hits, std::memory_order_relaxed)) {
    }
  }
};

// Counters by stat key ("domain.key_value.key"), kept across reloads. At most
// kMaxSeries keys: past it new ones count under "domain.other" (a detailed_metric rule
// on unbounded values must not grow memory without bound); and a key longer than
// kMaxKeyBytes is its first bytes and the whole key's hash (a request's values may be
// megabytes long).
class HitStats {
 public:
  static constexpr std::size_t kMaxSeries = 10000;
  static constexpr std::size_t kMaxKeyBytes = 256;
  static std::string bounded(const std::string& key);
  // The counters of `key` (created when new). Thread-safe.
  std::shared_ptr<HitCounters> get(const std::string& domain, const std::string& key);
  // Every key's counters, sorted by key: (domain, key, counters).
  struct Series {
    std::string domain;
    std::string key;
    std::shared_ptr<HitCounters> counters;
  };
  std::vector<Series> all() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Series, std::less<>> series_;
};

// One rate_limit of a descriptor.
struct RateLimitRule {
  std::string name;  // "" when none
  std::uint32_t requests_per_unit = 0;
  Unit unit = Unit::unknown;
  bool unlimited = false;
  std::vector<std::string> replaces;  // names of the rules this one replaces
  bool shadow = false;                // shadow_mode
  bool quota_mode = false;
  bool detailed_metric = false;  // stats by the request's values, not the configuration's
  // What the engine counts: none when unlimited or requests_per_unit is 0 (every hit is
  // over that limit).
  std::optional<Limit> limit;
  std::string stat_key;  // "domain.key_value.key": the configured path
  std::shared_ptr<HitCounters> counters;
};

// A descriptor of the configuration: its key, its value (may hold '*' wildcards), its
// rate limit and its children.
struct DescriptorNode {
  std::string key;
  std::string value;
  std::string final_key;  // key, or key_value
  bool wildcard = false;  // final_key holds '*'
  bool share_threshold = false;
  bool value_to_metric = false;
  bool detailed_metric = false;
  std::optional<RateLimitRule> rate_limit;
  std::vector<DescriptorNode> children;                // in the file's order
  std::unordered_map<std::string, std::size_t> index;  // final_key -> child
  std::vector<std::size_t> wildcards;                  // children with '*', in order
};

struct Domain {
  std::string name;
  std::string file;
  DescriptorNode root;  // its children are the top-level descriptors
};

// The engine's limit of `requests_per_unit` per `unit`, in the scope every descriptor's
// counter shares, or why it cannot be one. Sets spec's max and interval from them (so a
// LimitIssue can be described with it); its algorithm, burst and failure policy stay.
std::variant<Limit, LimitIssue> unit_limit(LimitSpec& spec, std::uint32_t requests_per_unit,
                                           Unit unit);

// Whether `text` matches `pattern`, each '*' in it standing for any run of characters
// (the reference's wildcards).
bool wildcard_match(std::string_view pattern, std::string_view text) noexcept;

// One entry of a request's descriptor.
struct Entry {
  std::string_view key;
  std::string_view value;
};

// What a request's descriptor matched.
struct Matched {
  const RateLimitRule* rule = nullptr;  // null: no limit
  // The descriptor's counter (unique per domain and entries; a share_threshold level
  // puts its pattern in place of the value), hashed for the engine.
  std::uint64_t resource = 0;
  // The stats key: the rule's, or for detailed_metric / value_to_metric the request's
  // values in place of the configuration's.
  std::string stat_key;
};

// How the configuration is read.
struct ConfigOptions {
  // The default algorithm and failure policy of rate limits that name none.
  Algorithm algorithm = Algorithm::sliding_window;
  FailurePolicy failure_policy = FailurePolicy::local;
  // Limits the engine could never hold (a window larger than its memory bound) are
  // refused with this, when set: how many limiters of a limit fit (Engine::capacity).
  std::function<std::size_t(const Limit&)> capacity;
  HitStats* stats = nullptr;  // where rules' counters live (none: private ones)
};

// A configuration folder's files as read, not parsed yet.
struct ConfigFiles {
  struct File {
    std::string path;
    std::string name;  // in the folder
    std::string bytes;
  };
  std::vector<File> files;  // in name order
  // Each file's name and bytes, one after the other: what the version hashes.
  std::string joined() const;
};

class Config {
 public:
  Config() = default;
  // Every *.yaml and *.yml file of `folder` (not hidden ones), in name order. Throws
  // RulesError naming the file, the line and the problem. read() then parse().
  static Config load(const std::string& folder, const ConfigOptions& options);
  // load()'s two steps: the files read (throws RulesError naming the folder or the file
  // that cannot be read), then parsed (throws RulesError naming the file and the line).
  static ConfigFiles read(const std::string& folder);
  static Config parse(const ConfigFiles& files, const ConfigOptions& options);
  // One file's text (for tests and the fuzz target): as load() for a folder of it.
  static Config parse(std::string_view yaml, const std::string& source,
                      const ConfigOptions& options);

  // The domain, or null.
  const Domain* domain(std::string_view name) const;
  // The limit for one descriptor's entries in `domain`, as the reference finds it: at
  // each level the exact key_value, else the first wildcard that matches, else the key
  // alone; the rule of the node the last entry reaches. Fills `out`.
  static void match(const Domain& domain, std::span<const Entry> entries, Matched& out);
  // The counter of a descriptor with a limit of its own (Envoy's `limit` override).
  static std::uint64_t override_resource(std::string_view domain, std::span<const Entry> entries);

  const std::string& version() const noexcept { return version_; }
  std::size_t domain_count() const noexcept { return domains_.size(); }
  std::size_t rule_count() const noexcept { return rules_; }
  // The files read, in order.
  const std::vector<std::string>& files() const noexcept { return files_; }

 private:
  friend class ConfigParser;
  std::map<std::string, Domain, std::less<>> domains_;
  std::vector<std::string> files_;
  std::string version_ = "empty";
  std::size_t rules_ = 0;
};

}  // namespace ratewin::server::rls
