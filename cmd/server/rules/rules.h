// rules.h: the server's rate-limit rules, read from a YAML file (rules.example.yaml
// documents the schema), and the lookup that turns a request into the limits it counts
// against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/rules_error.h"
#include "http/path.h"
#include "ratewin/limit.h"

namespace ratewin::server {

// Whose requests share one counter of a limit.
enum class Scope {
  key,       // each client key has its own
  endpoint,  // each (client key, endpoint name) has its own
  global,    // one for everybody (per tier for a tier's limit, per endpoint for an endpoint's)
};

// Where a request's client key comes from (defaults.client_key, or a limit's own): the
// first alternative whose parts all have a value, the parts' values joined with '|'
// ("acme|ip:10.0.0.1"); the address when none has. The default: the X-API-Key header, the
// bearer token, the address.
struct ClientKeySource {
  enum class Kind : char { header, cookie, query, bearer, address };
  Kind kind = Kind::address;
  std::string name;  // a header's name (lower case), a cookie's or a query parameter's
  bool operator==(const ClientKeySource&) const = default;
};
struct ClientKeySpec {
  std::vector<std::vector<ClientKeySource>> alternatives;
  // The fixed order X-API-Key, bearer, address.
  static const ClientKeySpec& standard();
  bool operator==(const ClientKeySpec&) const = default;
  // As the rules write it: ["header:X-API-Key", "bearer", "address"].
  std::vector<std::string> describe() const;
};

struct LimitRule {
  std::string name;      // unique in the file: "tier:free/per-second", "endpoint:search/burst",
                         // "override:<key>/<name>"
  ratewin::Limit limit;  // carries its algorithm and failure policy
  Scope scope = Scope::key;
  std::uint64_t cost = 1;
  // Whether Match::multiplier applies: true for a tier's or an override's limit counted per
  // key or per endpoint; false for endpoints' limits and global ones (a shared counter has
  // one max, whoever asks).
  bool scales = false;
  // What it counts per (scope key or endpoint): its own client key, or null for the
  // request's (defaults.client_key). Points into the Rules.
  const ClientKeySpec* client_key = nullptr;
};

enum class Action { limit, allow, deny };

struct Match {
  Action action = Action::limit;
  std::string_view tier;                 // "" when none
  std::string_view endpoint;             // matched endpoint name, "" when none
  std::vector<const LimitRule*> limits;  // empty unless action is limit; points into the Rules
  double multiplier = 1.0;               // from an override; see effective_limit()
  std::string loose_path;                // (match()'s room for a path's loose form)
};

class Rules {
 public:
  Rules();  // no limits at all: every request is allowed
  ~Rules();
  // Move-only. The data lives behind a pointer, so the LimitRule pointers handed out by
  // match() survive a move; a moved-from Rules may only be assigned to or destroyed.
  Rules(Rules&&) noexcept;
  Rules& operator=(Rules&&) noexcept;
  Rules(const Rules&) = delete;
  Rules& operator=(const Rules&) = delete;

  // Throws RulesError naming the line and the problem for any invalid input: YAML syntax,
  // unknown or duplicate fields, wrong types, bad numbers or durations, duplicate names,
  // unknown tiers, and so on. `source` names the input in messages.
  static Rules parse(std::string_view yaml, std::string source = "<rules>");
  // parse() of a file's contents (read()).
  static Rules load(const std::string& path);
  // A rules file's bytes, as load() reads them; a file that cannot be read (or is over
  // 16 MiB) is a RulesError without position.
  static std::string read(const std::string& path);

  // The limits a request counts against. `path` must be normalise_path()'s output
  // (Request::path): a raw target would let "/public/../admin" or "/%61dmin" dodge the
  // "/admin" endpoint. Endpoint paths are written in that canonical form (decoded; see
  // path.h). Requests whose paths backends read differently never get here: an encoded
  // '/' or '\', and ';' path parameters, are refused (400) rather than stripped, since
  // Tomcat and Spring drop ";x" and route "/a;x/b" as "/a/b" while nginx and Go route it
  // as written: either guess would let one kind of backend be dodged. A prefix endpoint
  // covers its subtree; a glob endpoint matches the path with or without one trailing
  // '/'. Clears and fills
  // `out`; allocates nothing once out.limits has grown to its largest size. Safe to call
  // from any number of threads.
  void match(std::string_view key, std::string_view method, std::string_view path,
             Match& out) const;

  // "<label>@<XXH3-64 of the file bytes, 16 hex digits>"; the label is the file's
  // `version`, or "unversioned".
  const std::string& version() const;
  // The active rules as one JSON object, for GET /admin/rules.
  std::string describe_json() const;
  std::size_t limit_count() const;
  // No limit, and no allow or deny entry: every request is allowed (an empty file, or
  // one cut short).
  bool says_nothing() const;
  // Whether limits in shadow (mode: shadow) appear in the rate-limit headers
  // (defaults.shadow_headers; false unless set).
  bool shadow_headers() const;
  // Where a request's client key comes from (defaults.client_key; ClientKeySpec::standard()
  // unless set): what tiers, allow, deny and overrides know clients by.
  const ClientKeySpec& client_key() const;
  // The headers any client key of the rules reads (defaults.client_key's and the limits'
  // own; lower case, each once): a request that sends one of them twice, or spells it
  // with '_' for '-', is ambiguous (proxies and backends would read another value).
  const std::vector<std::string>& key_headers() const { return key_headers_; }
  // Every limit the rules define (tiers', endpoints', overrides'), in the file's order.
  std::vector<const LimitRule*> limits() const;
  // The endpoints' names, in the file's order.
  std::vector<std::string_view> endpoint_names() const;

  struct Data;

 private:
  explicit Rules(std::unique_ptr<const Data> data);
  void find_key_headers();
  std::unique_ptr<const Data> data_;
  std::vector<std::string> key_headers_;
};

// A failure policy by the name the rules give it (local, open, closed, partitioned); false
// when none has it.
bool parse_failure_policy(std::string_view name, FailurePolicy& out) noexcept;

// A configuration's version: "<label>@<XXH3-64 of its bytes, 16 hex digits>".
std::string version_of(std::string_view label, std::string_view bytes);

// A limit's max from a computed count: rounded down, at least 1, at most
// Limit::kMaxCount (NaN gives 1).
std::uint64_t max_from(double count) noexcept;

// `limit` with another max, in its scope and window (Limit::with_max). A token bucket's
// burst scales with its max, rounded down, at least 1, so the bucket still refills it in
// about the same time (as a burst left to be max does); where that bucket could not be
// made, the max is raised to refill at least one unit in Limit::kMaxResolution, and the
// burst lowered to what refills in it. A sliding log's max stops at Limit::kMaxLogCount.
// Never throws for a max of 1 to Limit::kMaxCount.
ratewin::Limit with_scaled_max(const ratewin::Limit& limit, std::uint64_t max);

// The limit to ask the engine for: rule.limit, with max scaled by `multiplier` (rounded
// down, at least 1, at most Limit::kMaxCount; see with_scaled_max) when rule.scales. The
// scaled limit keeps its window, so a key's counts carry over when its multiplier changes
// (a sliding_log's in Redis only: this server's own copy of a log is per max).
ratewin::Limit effective_limit(const LimitRule& rule, double multiplier);

// Sets `out` to the name of the counter a request counts against for `rule` (hash it for
// the engine's resource id): the rule's name, then the endpoint and/or key its scope
// separates. Distinct (rule, key, endpoint) always give distinct names.
void resource_name(const LimitRule& rule, std::string_view key, std::string_view endpoint,
                   std::string& out);

}  // namespace ratewin::server
