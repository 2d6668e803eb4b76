// The rules file's parser: YAML in, a validated Rules::Data out, or a RulesError naming
// the line and the problem.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <system_error>
#include <variant>

#include "common/address.h"
#include "common/text.h"
#include "common/yaml_reader.h"
#include "ratewin/hash.h"
#include "rules/rules_data.h"

namespace ratewin::server {

namespace {

constexpr std::size_t kMaxNameLength = 64;
constexpr std::size_t kMaxLabelLength = 128;
constexpr std::uint32_t kDefaultSubintervals = 10;
constexpr std::size_t kMaxFileBytes = 16 << 20;

// A duration as this file writes it: in its largest whole unit (500ms, 90s, 2m, 1h, 50d).
std::string duration_text(std::chrono::milliseconds d) {
  static constexpr std::pair<std::int64_t, const char*> kUnits[] = {
      {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1000, "s"}};
  const std::int64_t ms = d.count();
  for (const auto& [size, unit] : kUnits)
    if (ms > 0 && ms % size == 0) return std::to_string(ms / size) + unit;
  return std::to_string(ms) + "ms";
}

using Item = YamlItem;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

class Parser : public YamlReader {
 public:
  Parser(std::string source, std::string_view bytes)
      : YamlReader(std::move(source)), bytes_(bytes), data_(std::make_unique<Rules::Data>()) {}

  std::unique_ptr<const Rules::Data> run();

 private:
  std::string key_pattern(const Item& item, bool glob) const;
  std::string name(const Item& item) const;
  double positive_number(const Item& item) const;
  std::chrono::milliseconds duration(const Item& item) const;
  std::size_t tier_ref(const Item& item) const;
  std::string endpoint_path(const Item& item) const;
  ClientKeySpec client_key(const Item& item) const;

  // A list's limits, each in `mode` unless it names its own.
  std::vector<const LimitRule*> limits(const Item& list, const std::string& owner, bool scalable,
                                       Mode mode);
  const LimitRule& limit(const Item& item, const std::string& owner, bool scalable, Mode mode,
                         Seen& names);
  void tiers(const Item& item);
  void keys(const Item& item);
  void endpoints(const Item& item);
  void overrides(const Item& item);
  void check_multiplier(const Item& at, const Rules::Data::Override& o) const;

  std::string_view bytes_;
  std::unique_ptr<Rules::Data> data_;
  bool default_algorithm_given_ = false;  // defaults.algorithm is in the file
};

// A client key or key glob. Clients known by their address have the key "ip:" and the
// address in canonical form (address.h), so an address written here is made canonical
// ("ip:::ffff:10.0.0.1" is "ip:10.0.0.1", "ip:2001:DB8::0001" is "ip:2001:db8::1"), and
// an "ip:" glob that could never match a canonical address is refused.
std::string Parser::key_pattern(const Item& item, bool glob) const {
  std::string s = text(item);
  if (!s.starts_with("ip:")) return s;
  const std::string_view address = std::string_view(s).substr(3);
  if (glob && address.find_first_of("*?") != std::string_view::npos) {
    const bool upper =
        std::any_of(address.begin(), address.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
    if (upper || address.find('%') != std::string_view::npos || address.starts_with("::ffff:") ||
        address.find("::") != address.rfind("::")) {
      fail(item, quoted_value(s) +
                     " can never match: \"ip:\" keys hold addresses in canonical form "
                     "(IPv4 dotted quads, IPv6 in lower case as RFC 5952 writes it, "
                     "no zone ID)");
    }
    return s;
  }
  const std::optional<std::string> canonical = canonical_address(address);
  if (!canonical) {
    fail(item, quoted_value(s) +
                   " is not an IP address (a key starting \"ip:\" names a client by "
                   "its address; no zone ID, no port)");
  }
  return "ip:" + *canonical;
}

std::string Parser::name(const Item& item) const {
  std::string s = text(item);
  if (s.size() > kMaxNameLength || !std::all_of(s.begin(), s.end(), name_char)) {
    fail(item, quoted_value(s) + " is not a name (up to 64 letters, digits, '_', '-' and '.')");
  }
  return s;
}

double Parser::positive_number(const Item& item) const {
  const std::string s = text(item);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v <= 0) {
    fail(item, quoted_value(s) + " is not a positive number");
  }
  return v;
}

std::chrono::milliseconds Parser::duration(const Item& item) const {
  const std::string s = text(item);
  static constexpr std::array<std::pair<std::string_view, std::int64_t>, 5> kUnits{
      {{"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}}};
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  const std::string_view unit(end, static_cast<std::size_t>(s.data() + s.size() - end));
  const auto u =
      std::find_if(kUnits.begin(), kUnits.end(), [&](const auto& p) { return p.first == unit; });
  if (end == s.data() || u == kUnits.end()) {
    fail(item, quoted_value(s) + " is not a duration (use 500ms, 1s, 1m, 1h or 1d)");
  }
  const auto per_unit = static_cast<std::uint64_t>(u->second);
  const auto longest = static_cast<std::uint64_t>(ratewin::Limit::kMaxInterval.count());
  if (ec != std::errc() || n > longest / per_unit)
    fail(item, quoted_value(s) + " is longer than 366 days");
  if (n == 0) fail(item, quoted_value(s) + " is not positive");
  return std::chrono::milliseconds(static_cast<std::int64_t>(n * per_unit));
}

std::size_t Parser::tier_ref(const Item& item) const {
  const std::string s = text(item);
  std::string names;
  for (std::size_t i = 0; i < data_->tiers.size(); ++i) {
    if (data_->tiers[i].name == s) return i;
    names += (names.empty() ? "" : ", ") + data_->tiers[i].name;
  }
  fail(item, "unknown tier " + quoted_value(s) +
                 (names.empty() ? " (no tiers are defined)" : " (tiers: " + names + ")"));
}

std::string Parser::endpoint_path(const Item& item) const {
  std::string p = text(item);
  if (p.front() != '/') fail(item, quoted_value(p) + " does not start with '/'");
  if (p.find('#') != std::string::npos) {
    fail(item, quoted_value(p) + " contains '#' (a fragment is never part of a request's path)");
  }
  // Requests are matched by their normalised path (path.h), so a path that a request
  // could not have, or that normalisation changes, could never match as written.
  // A glob's '?' is no query: checked as some byte that stays as it is.
  std::string plain = p;
  std::replace(plain.begin(), plain.end(), '?', 'Q');
  std::string fixed;
  std::string_view problem;
  if (!normalise_path(plain, fixed, problem)) {
    fail(item, quoted_value(p) + " is no path a request can have (" + std::string(problem) + ")");
  }
  if (fixed != plain) {
    fail(item, quoted_value(p) + " is not a normalised path" +
                   (plain == p ? " (write " + quoted_value(fixed) + ")"
                               : " (see path.h: decoded, but for space, '%', '#', non-ASCII)"));
  }
  return p;
}

// A client key's sources (ClientKeySpec): a list of alternatives, each one part or parts
// joined with '+', each part "header:<name>", "cookie:<name>", "query:<name>", "bearer"
// or "address".
ClientKeySpec Parser::client_key(const Item& item) const {
  using K = ClientKeySource::Kind;
  constexpr std::size_t kMaxAlternatives = 8;
  constexpr std::size_t kMaxParts = 4;
  ClientKeySpec spec;
  const std::vector<Item> alternatives = list(item);
  if (alternatives.empty()) fail(item, "a client key needs at least one source");
  if (alternatives.size() > kMaxAlternatives)
    fail(item, "at most " + std::to_string(kMaxAlternatives) + " alternatives");
  for (const Item& a : alternatives) {
    const std::string written = text(a);
    std::vector<ClientKeySource> parts;
    std::size_t start = 0;
    while (start <= written.size()) {
      std::size_t end = written.find('+', start);
      if (end == std::string::npos) end = written.size();
      const std::string_view part = std::string_view(written).substr(start, end - start);
      ClientKeySource source;
      const std::size_t colon = part.find(':');
      const std::string_view kind = part.substr(0, colon);
      const std::string_view name = colon == std::string_view::npos ? std::string_view() : part.substr(colon + 1);
      const bool named = kind == "header" || kind == "cookie" || kind == "query";
      if (kind == "bearer" && colon == std::string_view::npos) {
        source.kind = K::bearer;
      } else if (kind == "address" && colon == std::string_view::npos) {
        source.kind = K::address;
      } else if (named && !name.empty() && name.size() <= 64 &&
                 std::all_of(name.begin(), name.end(), [&](char c) {
                   return kind == "query" ? c > ' ' && c < 0x7f && c != '&' && c != '=' && c != '#' && c != '+'
                                          : token_char(c);
                 })) {
        source.kind = kind == "header" ? K::header : kind == "cookie" ? K::cookie : K::query;
        source.name.assign(name);
        if (source.kind == K::header)
          std::transform(source.name.begin(), source.name.end(), source.name.begin(),
                         [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
      } else {
        fail(a, quoted_value(std::string(part)) +
                    " is not a client key's source: header:<name>, cookie:<name>, query:<name>, "
                    "bearer or address (parts of one key joined with '+')");
      }
      if (std::find(parts.begin(), parts.end(), source) != parts.end())
        fail(a, quoted_value(written) + " names one source twice");
      parts.push_back(std::move(source));
      if (parts.size() > kMaxParts)
        fail(a, "at most " + std::to_string(kMaxParts) + " parts in one key");
      start = end + 1;
    }
    if (std::find(spec.alternatives.begin(), spec.alternatives.end(), parts) != spec.alternatives.end())
      fail(a, quoted_value(written) + " is listed twice");
    spec.alternatives.push_back(std::move(parts));
  }
  return spec;
}

const LimitRule& Parser::limit(const Item& item, const std::string& owner, bool scalable, Mode mode,
                               Seen& names) {
  const Fields f(*this, item,
                 {"name", "limit", "max", "window", "subintervals", "algorithm", "burst", "per",
                  "failure_policy", "cost", "mode", "client_key"});
  const Item name_item = f.need("name");
  const std::string short_name = name(name_item);
  check_unique(names, short_name, name_item, "limit name");
  ratewin::LimitSpec spec;
  // max and window, or both in one limit string ("10/second", as every front end reads it).
  const std::optional<Item> text_item = f.get("limit");
  std::optional<Item> max_item;
  std::optional<Item> window_item;
  if (text_item) {
    if (f.get("max") || f.get("window"))
      fail(*text_item, "give limit or max and window, not both");
    auto read = ratewin::read_limit(text(*text_item));
    if (const std::string* error = std::get_if<std::string>(&read)) fail(*text_item, *error);
    spec = std::get<ratewin::LimitSpec>(read);
  } else {
    max_item = f.need("max");
    spec.max = integer(*max_item, 0, UINT64_MAX);
    window_item = f.need("window");
    spec.interval = duration(*window_item);
  }
  const std::optional<Item> algorithm_item = f.get("algorithm");
  spec.algorithm = algorithm_item ? choice(*algorithm_item, kAlgorithms) : data_->default_algorithm;
  const std::optional<Item> burst_item = f.get("burst");
  if (burst_item) spec.burst = integer(*burst_item, 1, UINT64_MAX);
  const std::optional<Item> subintervals_item = f.get("subintervals");
  if (subintervals_item) {
    spec.subintervals = integer(*subintervals_item, 0, UINT64_MAX);
  } else if (spec.algorithm == Algorithm::sliding_window ||
             spec.algorithm == Algorithm::strict_window) {
    spec.subintervals = kDefaultSubintervals;  // (this file's default, not the library's)
  }
  const std::optional<Item> per = f.get("per");
  const Scope scope = per ? choice(*per, kScopes) : Scope::key;
  const std::optional<Item> policy_item = f.get("failure_policy");
  spec.failure_policy = policy_item ? choice(*policy_item, kPolicies) : data_->default_policy;
  if (const std::optional<Item> mode_item = f.get("mode")) mode = choice(*mode_item, kModes);
  spec.mode = mode;
  // Scoped by its name: a reload that changes max keeps what the rule counted (its
  // resources hold the name as well, so rules never share counts). So does a reload that
  // changes the algorithm but not the window and subintervals (sliding_window and
  // strict_window, or fixed_window and a window of one subinterval): limits of one scope
  // and geometry share their counts whatever their algorithms, and each decides from them
  // its own way. Another geometry starts from nothing. A token_bucket keeps one time, not
  // counts: it starts from nothing when a window becomes one or it becomes a window, and
  // keeps its time through a change of max, window or burst. The mode is not part of the
  // scope: a rule moved from shadow to enforce keeps what it counted in shadow.
  std::string name = owner + "/" + short_name;
  spec.scope = ratewin::hash(name);
  auto made = ratewin::Limit::from_spec(spec);
  if (const ratewin::LimitIssue* issue = std::get_if<ratewin::LimitIssue>(&made)) {
    // Said in this file's terms, at the item it is about.
    ratewin::LimitTerms terms;
    terms.interval = "window";
    terms.is = ": ";
    terms.duration = duration_text;
    const Item* at = text_item ? &*text_item : &*window_item;
    if (issue->field == ratewin::LimitField::max && max_item) at = &*max_item;
    if (issue->field == ratewin::LimitField::burst && burst_item) at = &*burst_item;
    if (issue->field == ratewin::LimitField::subintervals && subintervals_item)
      at = &*subintervals_item;
    std::string problem = ratewin::describe(*issue, spec, terms);
    if (issue->field == ratewin::LimitField::subintervals && !subintervals_item) {
      problem += " (the default subintervals: set subintervals to a divisor of the window)";
    }
    // Where an algorithm that is not this limit's own came from.
    if (issue->about_algorithm() && !algorithm_item) {
      problem += default_algorithm_given_ ? " (the algorithm set by defaults.algorithm)"
                                          : " (the default algorithm)";
    }
    fail(*at, problem);
  }
  const ratewin::Limit& l = std::get<ratewin::Limit>(made);
  std::uint64_t cost = 1;
  if (const std::optional<Item> cost_item = f.get("cost")) {
    cost = integer(*cost_item, 1, ratewin::Limit::kMaxCount);
    // The most a request may cost: a token bucket's burst (max for the others).
    if (cost > l.burst()) {
      fail(*cost_item, "cost " + std::to_string(cost) + " exceeds " +
                           (l.burst() != l.max() ? "burst " : "max ") + std::to_string(l.burst()) +
                           ": every request would be rejected");
    }
  }
  const ClientKeySpec* own_key = nullptr;
  if (const std::optional<Item> key_item = f.get("client_key")) {
    if (scope == Scope::global)
      fail(*key_item, "a limit counted per: global has one counter for everybody: no client key");
    own_key = &data_->limit_keys.emplace_back(client_key(*key_item));
  }
  return data_->rules.emplace_back(
      LimitRule{std::move(name), l, scope, cost, scalable && scope != Scope::global, own_key});
}

std::vector<const LimitRule*> Parser::limits(const Item& list_item, const std::string& owner,
                                             bool scalable, Mode mode) {
  std::vector<const LimitRule*> out;
  Seen names;
  for (const Item& item : list(list_item))
    out.push_back(&limit(item, owner, scalable, mode, names));
  return out;
}

void Parser::tiers(const Item& item) {
  if (item.node.IsNull()) return;
  for (const Entry& e : entries(item, "tier")) {
    const std::string tier = name(e.key);
    const Fields f(*this, e.value, {"limits", "mode"});
    const std::optional<Item> mode = f.get("mode");
    data_->tiers.push_back({tier, limits(f.need("limits"), "tier:" + tier, true,
                                         mode ? choice(*mode, kModes) : data_->default_mode)});
  }
}

void Parser::keys(const Item& item) {
  for (const Item& k : list(item, true)) {
    const Fields f(*this, k, {"match", "tier"});
    std::string pattern = key_pattern(f.need("match"), true);
    data_->key_tiers.push_back(tier_ref(f.need("tier")));
    data_->keys.add(std::move(pattern));
  }
}

void Parser::endpoints(const Item& item) {
  Seen seen;
  for (const Item& e : list(item, true)) {
    const Fields f(*this, e, {"name", "path", "path_match", "methods", "limits"});
    Rules::Data::Endpoint endpoint;
    const Item name_item = f.need("name");
    endpoint.name = name(name_item);
    check_unique(seen, endpoint.name, name_item, "endpoint name");
    endpoint.path = endpoint_path(f.need("path"));
    endpoint.glob = endpoint.path.find_first_of("*?") != std::string::npos;
    if (const std::optional<Item> m = f.get("path_match")) endpoint.loose = choice(*m, kPathMatches);
    if (endpoint.loose) {
      loose_path(endpoint.path, endpoint.pattern);
    } else {
      endpoint.pattern = endpoint.path;
    }
    if (!endpoint.glob) {
      endpoint.prefix = endpoint.pattern.ends_with('/')
                            ? endpoint.pattern.substr(0, endpoint.pattern.size() - 1)
                            : endpoint.pattern;
    }
    if (const std::optional<Item> methods = f.get("methods")) {
      const std::vector<Item> items = list(*methods);
      if (items.empty())
        fail(*methods,
             "an empty list matches no request (leave methods out to match every method)");
      Seen seen_methods;
      for (const Item& m : items) {
        std::string method = text(m);
        if (!std::all_of(method.begin(), method.end(),
                         [](char c) { return c >= 'A' && c <= 'Z'; })) {
          fail(m, quoted_value(method) +
                      " is not an HTTP method such as GET (methods are upper case)");
        }
        check_unique(seen_methods, method, m, "method");
        endpoint.methods.push_back(std::move(method));
      }
    }
    endpoint.limits =
        limits(f.need("limits"), "endpoint:" + endpoint.name, false, data_->default_mode);
    data_->endpoints.push_back(std::move(endpoint));
  }
}

void Parser::overrides(const Item& item) {
  Seen seen;
  for (const Item& o : list(item, true)) {
    const Fields f(*this, o, {"key", "tier", "multiplier", "limits"});
    Rules::Data::Override override;
    const Item key_item = f.need("key");
    override.key = key_pattern(key_item, false);
    check_unique(seen, override.key, key_item, "override key");
    const std::optional<Item> tier = f.get("tier");
    const std::optional<Item> multiplier = f.get("multiplier");
    const std::optional<Item> own_limits = f.get("limits");
    if (!tier && !multiplier && !own_limits)
      fail(o, "an override needs tier, multiplier or limits");
    if (tier) override.tier = tier_ref(*tier);
    if (multiplier) override.multiplier = positive_number(*multiplier);
    if (own_limits)
      override.limits = limits(*own_limits, "override:" + override.key, true, data_->default_mode);
    data_->override_index.emplace(override.key, data_->overrides.size());
    data_->overrides.push_back(std::move(override));
    if (multiplier) check_multiplier(*multiplier, data_->overrides.back());
  }
}

// A multiplier below 1 can push a limit's max under its cost, which would reject the key
// outright: almost certainly not what was meant.
void Parser::check_multiplier(const Item& at, const Rules::Data::Override& o) const {
  const Rules::Data::Resolved r = data_->resolve(o.key);
  const std::vector<const LimitRule*>* rules = Rules::Data::key_limits(r);
  if (rules == nullptr) return;
  for (const LimitRule* rule : *rules) {
    // The most a request may cost: a token bucket's burst (which scales with its max).
    const ratewin::Limit scaled = effective_limit(*rule, *o.multiplier);
    if (scaled.burst() < rule->cost) {
      fail(at, "multiplier " + to_json_number(*o.multiplier) + " brings " + rule->name +
                   (scaled.algorithm() == Algorithm::token_bucket ? " to burst " : " to max ") +
                   std::to_string(scaled.burst()) + ", below its cost " +
                   std::to_string(rule->cost) + ": every request would be rejected");
    }
  }
}

std::unique_ptr<const Rules::Data> Parser::run() {
  const YAML::Node document = YamlReader::document(std::string(bytes_));
  std::string label = "unversioned";
  if (!document.IsNull()) {
    const Item root{document, document.Mark(), ""};
    const Fields f(*this, root,
                   {"version", "defaults", "tiers", "default_tier", "keys", "endpoints",
                    "overrides", "allow", "deny"});
    if (const std::optional<Item> v = f.get("version")) {
      label = text(*v);
      if (label.size() > kMaxLabelLength || label.front() == ' ' || label.back() == ' ' ||
          !std::all_of(label.begin(), label.end(), [](char c) { return c >= ' ' && c <= '~'; })) {
        fail(*v, quoted_value(label) +
                     " is not a label of up to 128 printable ASCII characters (it is sent in "
                     "HTTP headers)");
      }
    }
    if (const std::optional<Item> d = f.get("defaults"); d && !d->node.IsNull()) {
      const Fields defaults(*this, *d,
                            {"failure_policy", "algorithm", "mode", "shadow_headers", "client_key"});
      if (const std::optional<Item> k = defaults.get("client_key")) {
        data_->client_key = client_key(*k);
        data_->standard_client_key = data_->client_key == ClientKeySpec::standard();
      }
      if (const std::optional<Item> p = defaults.get("failure_policy")) {
        data_->default_policy = choice(*p, kPolicies);
      }
      if (const std::optional<Item> a = defaults.get("algorithm")) {
        data_->default_algorithm = choice(*a, kAlgorithms);
        default_algorithm_given_ = true;
      }
      if (const std::optional<Item> m = defaults.get("mode"))
        data_->default_mode = choice(*m, kModes);
      if (const std::optional<Item> h = defaults.get("shadow_headers")) {
        data_->shadow_headers = choice(*h, kBooleans);
      }
    }
    if (const std::optional<Item> t = f.get("tiers")) tiers(*t);
    if (const std::optional<Item> t = f.get("default_tier")) data_->default_tier = tier_ref(*t);
    if (const std::optional<Item> k = f.get("keys")) keys(*k);
    if (const std::optional<Item> e = f.get("endpoints")) endpoints(*e);
    if (const std::optional<Item> o = f.get("overrides")) overrides(*o);
    for (const auto& [field, globs] :
         {std::pair{"allow", &data_->allow}, std::pair{"deny", &data_->deny}}) {
      if (const std::optional<Item> l = f.get(field)) {
        for (const Item& g : list(*l, true)) globs->add(key_pattern(g, true));
      }
    }
  }
  data_->version = version_of(label, bytes_);
  return std::move(data_);
}
}  // namespace

Rules Rules::parse(std::string_view yaml, std::string source) {
  return Rules(Parser(std::move(source), yaml).run());
}

std::string Rules::read(const std::string& path) { return read_config_file(path, kMaxFileBytes); }

Rules Rules::load(const std::string& path) { return parse(read(path), path); }
}  // namespace ratewin::server
