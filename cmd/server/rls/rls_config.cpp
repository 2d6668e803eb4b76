// envoyproxy/ratelimit's descriptor files: the parser (every check the reference makes,
// and the ones it misses: misspelt fields, replaces naming nothing) and the matcher.
#include "rls/rls_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <system_error>
#include <utility>
#include <variant>

#include "common/yaml_reader.h"
#include "ratewin/hash.h"

namespace ratewin::server::rls {

namespace {

constexpr std::size_t kMaxFileBytes = 16 << 20;

struct UnitInfo {
  Unit unit;
  const char* name;
  std::int64_t seconds;
};
constexpr std::array<UnitInfo, 7> kUnits{{
    {Unit::second, "second", 1},
    {Unit::minute, "minute", 60},
    {Unit::hour, "hour", 3600},
    {Unit::day, "day", 86400},
    {Unit::month, "month", 30 * 86400},
    {Unit::year, "year", 365 * 86400},
    {Unit::week, "week", 7 * 86400},
}};

std::string seconds_text(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + "s";
}

// The bytes a descriptor's counter is named by: the domain, then each entry's key and
// value, each ended by a NUL (which neither may hold unnoticed: the lengths differ).
void append_part(std::string& out, std::string_view part) {
  out += part;
  out += '\0';
}

}  // namespace

std::chrono::seconds unit_length(Unit unit) noexcept {
  for (const UnitInfo& u : kUnits)
    if (u.unit == unit) return std::chrono::seconds(u.seconds);
  return std::chrono::seconds(0);
}

std::optional<Unit> parse_unit(std::string_view name) noexcept {
  for (const UnitInfo& u : kUnits) {
    const std::string_view n(u.name);
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      return u.unit;
    }
  }
  return std::nullopt;
}

const char* unit_name(Unit unit) noexcept {
  for (const UnitInfo& u : kUnits)
    if (u.unit == unit) return u.name;
  return "unknown";
}

std::string HitStats::bounded(const std::string& key) {
  if (key.size() <= kMaxKeyBytes) return key;
  // A prefix cut at a character's start, and the whole key's hash: distinct keys stay
  // distinct series, each at most kMaxKeyBytes.
  std::size_t cut = kMaxKeyBytes - 17;
  while (cut > 0 && (static_cast<unsigned char>(key[cut]) & 0xc0) == 0x80) --cut;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = key.substr(0, cut);
  out += '~';
  const std::uint64_t h = hash(key);
  for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(h >> shift) & 15];
  return out;
}

std::shared_ptr<HitCounters> HitStats::get(const std::string& domain, const std::string& whole) {
  const std::string key = bounded(whole);
  std::lock_guard lock(mutex_);
  if (const auto it = series_.find(key); it != series_.end()) return it->second.counters;
  if (series_.size() >= kMaxSeries) {
    const std::string other = domain + ".other";
    if (const auto it = series_.find(other); it != series_.end()) return it->second.counters;
    // (The one series past the bound per domain.)
    auto counters = std::make_shared<HitCounters>();
    series_.emplace(other, Series{domain, other, counters});
    return counters;
  }
  auto counters = std::make_shared<HitCounters>();
  series_.emplace(key, Series{domain, key, counters});
  return counters;
}

std::vector<HitStats::Series> HitStats::all() const {
  std::lock_guard lock(mutex_);
  std::vector<Series> out;
  out.reserve(series_.size());
  for (const auto& [key, series] : series_) out.push_back(series);
  return out;
}

std::variant<Limit, LimitIssue> unit_limit(LimitSpec& spec, std::uint32_t requests_per_unit,
                                           Unit unit) {
  spec.max = requests_per_unit;
  spec.interval = std::chrono::duration_cast<std::chrono::milliseconds>(unit_length(unit));
  std::variant<Limit, LimitIssue> made = Limit::from_spec(spec);
  // Rules matching the same entries share a counter whatever their max (as the
  // reference's counter key holds no limit): a limit changed on reload, or Envoy's
  // override of it, keeps what was counted.
  if (Limit* limit = std::get_if<Limit>(&made)) *limit = limit->with_scope("rls");
  return made;
}

bool wildcard_match(std::string_view pattern, std::string_view text) noexcept {
  // The parts between '*'s: the first must start the text, the last end it, and the ones
  // between appear in order, each leftmost (greedy leftmost is exact for this language).
  const std::size_t first_star = pattern.find('*');
  if (first_star == std::string_view::npos) return pattern == text;
  const std::size_t last_star = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first_star);
  const std::string_view tail = pattern.substr(last_star + 1);
  if (text.size() < head.size() + tail.size() || !text.starts_with(head) || !text.ends_with(tail)) {
    return false;
  }
  std::string_view middle = text.substr(head.size(), text.size() - head.size() - tail.size());
  std::string_view rest = pattern.substr(first_star + 1, last_star - first_star);
  while (!rest.empty()) {
    const std::size_t star = rest.find('*');
    const std::string_view part = rest.substr(0, star);
    rest = star == std::string_view::npos ? std::string_view() : rest.substr(star + 1);
    if (part.empty()) continue;
    const std::size_t at = middle.find(part);
    if (at == std::string_view::npos) return false;
    middle.remove_prefix(at + part.size());
  }
  return true;
}

// One file's domain, or the error naming its line.
class ConfigParser : public YamlReader {
 public:
  ConfigParser(std::string source, const ConfigOptions& options, Config& config)
      : YamlReader(std::move(source)), options_(options), config_(config) {}

  void run(const std::string& bytes) {
    const YAML::Node doc = document(bytes);
    const YamlItem root{doc, doc.Mark(), ""};
    if (doc.IsNull()) fail(root, "config file cannot have empty domain");
    const Fields f(*this, root, {"domain", "descriptors"});
    Domain domain;
    const std::optional<YamlItem> name_item = f.get("domain");
    domain.name = name_item ? scalar(*name_item) : std::string();
    if (domain.name.empty())
      fail(name_item ? *name_item : root, "config file cannot have empty domain");
    if (const auto it = config_.domains_.find(domain.name); it != config_.domains_.end()) {
      fail(*name_item,
           "duplicate domain " + quoted_value(domain.name) + " (also in " + it->second.file + ")");
    }
    domain.file = source();
    domain_ = domain.name;
    if (const std::optional<YamlItem> d = f.get("descriptors"))
      descriptors(*d, domain.root, domain.name);
    // A replaces entry must name a rate limit of this domain (no other can be in the same
    // request), and not its own.
    for (const auto& [at, name] : replaced_) {
      if (std::find(names_.begin(), names_.end(), name) == names_.end()) {
        fail(at, "replaces " + quoted_value(name) + ", but no rate_limit of domain " +
                     quoted_value(domain.name) + " has that name");
      }
    }
    config_.domains_.emplace(domain.name, std::move(domain));
  }

 private:
  void descriptors(const YamlItem& item, DescriptorNode& parent, const std::string& prefix) {
    Seen seen;
    for (const YamlItem& e : list(item, true)) {
      if (!e.node.IsMap()) fail(e, "a descriptor must be a mapping, got " + kind_of(e.node));
      const Fields f(*this, e,
                     {"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
                      "detailed_metric", "value_to_metric", "share_threshold", "metadata"});
      DescriptorNode node;
      const std::optional<YamlItem> key = f.get("key");
      node.key = key ? scalar(*key) : std::string();
      if (node.key.empty()) fail(key ? *key : e, "descriptor has empty key");
      if (const std::optional<YamlItem> v = f.get("value")) node.value = scalar(*v);
      node.final_key = node.value.empty() ? node.key : node.key + "_" + node.value;
      node.wildcard = node.final_key.find('*') != std::string::npos;
      const std::string path = prefix + "." + node.final_key;
      const auto [first, added] = seen.emplace(node.final_key, e.mark);
      if (!added) {
        fail(key ? *key : e, "duplicate descriptor composite key " + quoted_value(path) +
                                 " (first at line " + line_of(first->second) + ")");
      }
      const auto flag = [&](std::string_view name) {
        const std::optional<YamlItem> i = f.get(name);
        return i && boolean(*i);
      };
      node.share_threshold = flag("share_threshold");
      if (node.share_threshold && !node.wildcard) {
        fail(*f.get("share_threshold"),
             "share_threshold can only be used with wildcard values (containing '*'), but "
             "found key " +
                 quoted_value(node.final_key));
      }
      node.value_to_metric = flag("value_to_metric");
      node.detailed_metric = flag("detailed_metric");
      if (const std::optional<YamlItem> m = f.get("metadata"); m && !m->node.IsNull()) {
        entries(*m, "metadata field");  // a mapping; its contents are not used here
      }
      const bool shadow = flag("shadow_mode");
      const bool quota_mode = flag("quota_mode");
      if (const std::optional<YamlItem> r = f.get("rate_limit"); r && !r->node.IsNull()) {
        node.rate_limit.emplace(rate_limit(*r, path));
        RateLimitRule& rule = *node.rate_limit;
        rule.shadow = shadow;
        // Counted as if it enforced; what it would refuse is let through (Mode::shadow).
        if (rule.shadow && rule.limit) rule.limit = rule.limit->with_mode(Mode::shadow);
        rule.quota_mode = quota_mode;
        rule.detailed_metric = node.detailed_metric;
      }
      if (const std::optional<YamlItem> d = f.get("descriptors")) descriptors(*d, node, path);
      parent.index.emplace(node.final_key, parent.children.size());
      if (node.wildcard) parent.wildcards.push_back(parent.children.size());
      parent.children.push_back(std::move(node));
    }
  }

  RateLimitRule rate_limit(const YamlItem& item, const std::string& path) {
    const Fields f(*this, item,
                   {"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm",
                    "burst", "failure_policy"});
    RateLimitRule rule;
    rule.stat_key = path;
    if (const std::optional<YamlItem> u = f.get("unlimited")) rule.unlimited = boolean(*u);
    const std::optional<YamlItem> unit_item = f.get("unit");
    const std::string unit_text = unit_item ? scalar(*unit_item) : std::string();
    const std::optional<Unit> unit = parse_unit(unit_text);
    if (rule.unlimited) {
      if (unit) fail(*unit_item, "should not specify rate limit unit when unlimited");
    } else if (!unit) {
      fail(unit_item ? *unit_item : item, "invalid rate limit unit " + quoted_value(unit_text) +
                                              " (second, minute, hour, day, week, month or year)");
    } else {
      rule.unit = *unit;
    }
    if (const std::optional<YamlItem> n = f.get("requests_per_unit")) {
      rule.requests_per_unit = static_cast<std::uint32_t>(integer(*n, 0, UINT32_MAX));
    }
    if (const std::optional<YamlItem> n = f.get("name")) {
      rule.name = scalar(*n);
      if (!rule.name.empty()) names_.push_back(rule.name);
    }
    if (const std::optional<YamlItem> r = f.get("replaces")) {
      for (const YamlItem& entry : list(*r, true)) {
        const Fields rf(*this, entry, {"name"});
        const std::optional<YamlItem> n = rf.get("name");
        const std::string name = n ? scalar(*n) : std::string();
        if (name.empty()) fail(n ? *n : entry, "should not have an empty replaces entry");
        if (name == rule.name) fail(*n, "replaces should not contain name of same descriptor");
        rule.replaces.push_back(name);
        replaced_.emplace_back(*n, name);
      }
    }
    LimitSpec spec;
    spec.algorithm = options_.algorithm;
    spec.failure_policy = options_.failure_policy;
    const std::optional<YamlItem> algorithm_item = f.get("algorithm");
    if (algorithm_item) {
      const std::string a = text(*algorithm_item);
      if (!parse_algorithm(a, spec.algorithm)) {
        fail(*algorithm_item, quoted_value(a) +
                                  " is not one of sliding_window, strict_window, "
                                  "fixed_window, token_bucket, sliding_log");
      }
    }
    const std::optional<YamlItem> burst_item = f.get("burst");
    if (burst_item) spec.burst = integer(*burst_item, 1, Limit::kMaxCount);
    if (const std::optional<YamlItem> p = f.get("failure_policy")) {
      const std::string name = text(*p);
      if (!parse_failure_policy(name, spec.failure_policy))
        fail(*p, quoted_value(name) + " is not one of local, open, closed, partitioned");
    }
    if (rule.unlimited || rule.requests_per_unit == 0) {
      if (burst_item) fail(*burst_item, "a burst needs a limit (requests_per_unit above 0)");
    } else {
      std::variant<Limit, LimitIssue> made = unit_limit(spec, rule.requests_per_unit, rule.unit);
      if (const LimitIssue* issue = std::get_if<LimitIssue>(&made)) {
        LimitTerms terms;
        terms.max = "requests_per_unit";
        terms.interval = "unit";
        terms.is = " ";
        terms.duration = seconds_text;
        const YamlItem& at = issue->field == LimitField::burst && burst_item ? *burst_item
                             : issue->about_algorithm() && algorithm_item    ? *algorithm_item
                                                                             : item;
        fail(at, describe(*issue, spec, terms));
      }
      rule.limit = std::get<Limit>(made);
      if (options_.capacity && options_.capacity(*rule.limit) == 0) {
        fail(item, "a " + std::string(unit_name(rule.unit)) +
                       "'s window does not fit in the engine's memory bound (--max-memory)");
      }
    }
    ++config_.rules_;
    rule.counters = options_.stats != nullptr ? options_.stats->get(domain_, rule.stat_key)
                                              : std::make_shared<HitCounters>();
    return rule;
  }

  const ConfigOptions& options_;
  Config& config_;
  std::string domain_;
  std::vector<std::string> names_;                          // rate limits' names
  std::vector<std::pair<YamlItem, std::string>> replaced_;  // replaces entries
};

Config Config::parse(std::string_view yaml, const std::string& source,
                     const ConfigOptions& options) {
  Config config;
  ConfigParser(source, options, config).run(std::string(yaml));
  config.files_.push_back(source);
  std::string all(source);
  all += '\0';
  all += yaml;
  config.version_ = version_of("rls", all);
  return config;
}

std::string ConfigFiles::joined() const {
  std::string all;
  for (const File& f : files) {
    all += f.name;
    all += '\0';
    all += f.bytes;
    all += '\0';
  }
  return all;
}

Config Config::load(const std::string& folder, const ConfigOptions& options) {
  return parse(read(folder), options);
}

ConfigFiles Config::read(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    if (name.starts_with('.') || (p.extension() != ".yaml" && p.extension() != ".yml")) continue;
    std::error_code type_ec;
    // (Follows symlinks: a ConfigMap's.) A FIFO, a folder or a dangling link named like a
    // configuration file is an error, not a file skipped in silence.
    if (!it->is_regular_file(type_ec)) {
      throw RulesError(p.string(), 0, 0,
                       "not a regular file (a FIFO, a folder or a dangling link?): a "
                       "configuration file cannot be read from it");
    }
    paths.push_back(p);
  }
  if (ec) throw RulesError(folder, 0, 0, "cannot read the folder: " + ec.message());
  std::sort(paths.begin(), paths.end());
  ConfigFiles found;
  for (const fs::path& p : paths) {
    found.files.push_back(ConfigFiles::File{p.string(), p.filename().string(),
                                            read_config_file(p.string(), kMaxFileBytes)});
  }
  return found;
}

Config Config::parse(const ConfigFiles& files, const ConfigOptions& options) {
  Config config;
  for (const ConfigFiles::File& f : files.files) {
    ConfigParser(f.path, options, config).run(f.bytes);
    config.files_.push_back(f.path);
  }
  config.version_ = version_of("rls", files.joined());
  return config;
}

const Domain* Config::domain(std::string_view name) const {
  const auto it = domains_.find(name);
  return it == domains_.end() ? nullptr : &it->second;
}

void Config::match(const Domain& domain, std::span<const Entry> entries, Matched& out) {
  out.rule = nullptr;
  out.resource = 0;
  out.stat_key.clear();
  thread_local std::string final_key;
  thread_local std::string counter;
  // The configuration's node at each level, to name the counter and the stats.
  thread_local std::vector<const DescriptorNode*> path;
  path.clear();
  const DescriptorNode* node = &domain.root;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    final_key.assign(e.key);
    final_key += '_';
    final_key += e.value;
    const DescriptorNode* next = nullptr;
    if (const auto it = node->index.find(final_key); it != node->index.end()) {
      next = &node->children[it->second];
    } else {
      for (const std::size_t w : node->wildcards) {
        if (wildcard_match(node->children[w].final_key, final_key)) {
          next = &node->children[w];
          break;
        }
      }
      if (next == nullptr) {
        final_key.assign(e.key);
        if (const auto d = node->index.find(final_key); d != node->index.end())
          next = &node->children[d->second];
      }
    }
    if (next == nullptr) return;
    path.push_back(next);
    if (i + 1 == entries.size() && next->rate_limit) out.rule = &*next->rate_limit;
    if (next->children.empty()) break;
    node = next;
  }
  if (out.rule == nullptr) return;
  counter.clear();
  append_part(counter, domain.name);
  bool by_request = out.rule->detailed_metric;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    append_part(counter, entries[i].key);
    append_part(counter,
                path[i]->share_threshold ? std::string_view(path[i]->value) : entries[i].value);
    by_request = by_request || path[i]->value_to_metric;
  }
  out.resource = hash(counter);
  if (by_request) {
    // detailed_metric: every level by the request's values; value_to_metric: its own.
    out.stat_key = domain.name;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      out.stat_key += '.';
      if (out.rule->detailed_metric || path[i]->value_to_metric) {
        out.stat_key += entries[i].key;
        if (!entries[i].value.empty()) {
          out.stat_key += '_';
          out.stat_key += entries[i].value;
        }
      } else {
        out.stat_key += path[i]->final_key;
      }
    }
  }
}

std::uint64_t Config::override_resource(std::string_view domain, std::span<const Entry> entries) {
  thread_local std::string counter;
  counter.clear();
  append_part(counter, domain);
  for (const Entry& e : entries) {
    append_part(counter, e.key);
    append_part(counter, e.value);
  }
  return hash(counter);
}

}  // namespace ratewin::server::rls
