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

#include "address.h"
#include "ratewin/hash.h"
#include "rules_data.h"

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

// A value for an error message: quoted, escaped, and cut short if long.
std::string quoted(std::string_view s) {
  constexpr std::size_t kMax = 60;
  std::string out;
  if (s.size() <= kMax) {
    append_json_string(out, s);
    return out;
  }
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  append_json_string(out, std::string(s.substr(0, cut)) + "...");
  return out;
}

// A node and where it is, for error messages.
struct Item {
  YAML::Node node;
  YAML::Mark mark;   // yaml-cpp marks an empty value at the next token, so for one of
                     // those this is its key's mark
  std::string path;  // "tiers.free.limits[0].window"; "" for the root
};

std::string join(const std::string& path, std::string_view name) {
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}

std::string line_of(const YAML::Mark& mark) { return std::to_string(mark.line + 1); }

std::string kind_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return quoted(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "an undefined value";
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

// Names met so far in a list, with where, to report duplicates.
using Seen = std::map<std::string, YAML::Mark, std::less<>>;

class Parser {
 public:
  Parser(std::string source, std::string_view bytes)
      : source_(std::move(source)), bytes_(bytes), data_(std::make_unique<Rules::Data>()) {}

  std::unique_ptr<const Rules::Data> run();

 private:
  struct Entry {
    std::string name;
    Item key;
    Item value;
  };

  // The fields of a mapping with a fixed set of names.
  class Fields {
   public:
    Fields(const Parser& parser, const Item& map, std::initializer_list<std::string_view> known)
        : parser_(parser), map_(map), entries_(parser.entries(map)) {
      for (const Entry& e : entries_) {
        if (std::find(known.begin(), known.end(), e.name) != known.end()) continue;
        std::string expected;
        for (const std::string_view k : known)
          expected += (expected.empty() ? "" : ", ") + std::string(k);
        parser.fail(e.key,
                    "unknown field " + quoted(e.name) + " (expected one of: " + expected + ")");
      }
    }
    std::optional<Item> get(std::string_view name) const {
      for (const Entry& e : entries_) {
        if (e.name == name) return e.value;
      }
      return std::nullopt;
    }
    Item need(std::string_view name) const {
      if (std::optional<Item> item = get(name)) return std::move(*item);
      parser_.fail(map_, "missing field \"" + std::string(name) + "\"");
    }

   private:
    const Parser& parser_;
    Item map_;
    std::vector<Entry> entries_;
  };

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& path,
                         const std::string& problem) const {
    // yaml-cpp's marks are 0-based, and -1 when it has none.
    throw RulesError(source_, mark.line < 0 ? 0 : mark.line + 1,
                     mark.line < 0 ? 0 : mark.column + 1,
                     path.empty() ? problem : path + ": " + problem);
  }
  [[noreturn]] void fail(const Item& at, const std::string& problem) const {
    fail(at.mark, at.path, problem);
  }

  std::vector<Entry> entries(const Item& map, std::string_view what = "field") const;
  std::vector<Item> list(const Item& item, bool empty_ok = false) const;
  std::string text(const Item& item) const;
  std::string key_pattern(const Item& item, bool glob) const;
  std::string name(const Item& item) const;
  std::uint64_t integer(const Item& item, std::uint64_t lo, std::uint64_t hi) const;
  double positive_number(const Item& item) const;
  std::chrono::milliseconds duration(const Item& item) const;
  template <typename T, std::size_t N>
  T choice(const Item& item, const std::array<std::pair<std::string_view, T>, N>& table) const;
  std::size_t tier_ref(const Item& item) const;
  std::string endpoint_path(const Item& item) const;
  void check_unique(Seen& seen, const std::string& value, const Item& item,
                    std::string_view what) const;

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

  std::string source_;
  std::string_view bytes_;
  std::unique_ptr<Rules::Data> data_;
  bool default_algorithm_given_ = false;  // defaults.algorithm is in the file
};

std::vector<Parser::Entry> Parser::entries(const Item& map, std::string_view what) const {
  if (!map.node.IsMap()) fail(map, "expected a mapping, got " + kind_of(map.node));
  std::vector<Entry> out;
  Seen seen;
  for (auto it = map.node.begin(); it != map.node.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar())
      fail(key.Mark(), map.path, "a field name must be a string, got " + kind_of(key));
    const Item key_item{key, key.Mark(), map.path};
    check_unique(seen, key.Scalar(), key_item, what);  // yaml-cpp keeps both of a duplicate pair
    const YAML::Node value = it->second;
    out.push_back(Entry{
        key.Scalar(), key_item,
        Item{value, value.IsNull() ? key.Mark() : value.Mark(), join(map.path, key.Scalar())}});
  }
  return out;
}

std::vector<Item> Parser::list(const Item& item, bool empty_ok) const {
  std::vector<Item> out;
  if (empty_ok && item.node.IsNull()) return out;
  if (!item.node.IsSequence()) fail(item, "expected a list, got " + kind_of(item.node));
  std::size_t i = 0;
  for (auto it = item.node.begin(); it != item.node.end(); ++it, ++i) {
    const YAML::Node element = *it;
    out.push_back(Item{element, element.IsNull() ? item.mark : element.Mark(),
                       item.path + "[" + std::to_string(i) + "]"});
  }
  return out;
}

std::string Parser::text(const Item& item) const {
  if (!item.node.IsScalar()) fail(item, "expected a string, got " + kind_of(item.node));
  const std::string& s = item.node.Scalar();
  if (s.empty()) fail(item, "must not be empty");
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) fail(item, quoted(s) + " contains a control character");
    const std::size_t n = utf8_length(s, i);
    if (n == 0) fail(item, quoted(s) + " is not valid UTF-8");
    i += n;
  }
  return s;
}

// A client key or key glob. Clients known by their address have the key "ip:" and the
// address in canonical form (address.h), so an address written here is made canonical
// ("ip:::ffff:10.0.0.1" is "ip:10.0.0.1", "ip:2001:DB8::0001" is "ip:2001:db8::1"), and
// an "ip:" glob that could never match a canonical address is refused.
std::string Parser::key_pattern(const Item& item, bool glob) const {
  std::string s = text(item);
  if (!s.starts_with("ip:")) return s;
  const std::string_view address = std::string_view(s).substr(3);
  if (glob && address.find_first_of("*?") != std::string_view::npos) {
    const bool upper = std::any_of(address.begin(), address.end(),
                                   [](char c) { return c >= 'A' && c <= 'Z'; });
    if (upper || address.find('%') != std::string_view::npos ||
        address.starts_with("::ffff:") || address.find("::") != address.rfind("::")) {
      fail(item, quoted(s) + " can never match: \"ip:\" keys hold addresses in canonical form "
                             "(IPv4 dotted quads, IPv6 in lower case as RFC 5952 writes it, "
                             "no zone ID)");
    }
    return s;
  }
  const std::optional<std::string> canonical = canonical_address(address);
  if (!canonical) {
    fail(item, quoted(s) + " is not an IP address (a key starting \"ip:\" names a client by "
                           "its address; no zone ID, no port)");
  }
  return "ip:" + *canonical;
}

std::string Parser::name(const Item& item) const {
  std::string s = text(item);
  if (s.size() > kMaxNameLength || !std::all_of(s.begin(), s.end(), name_char)) {
    fail(item, quoted(s) + " is not a name (up to 64 letters, digits, '_', '-' and '.')");
  }
  return s;
}

std::uint64_t Parser::integer(const Item& item, std::uint64_t lo, std::uint64_t hi) const {
  const std::string s = text(item);
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
    fail(item, quoted(s) + " is not a whole number " +
                   (hi == UINT64_MAX ? "of " + std::to_string(lo) + " or more"
                                     : "from " + std::to_string(lo) + " to " + std::to_string(hi)));
  }
  return v;
}

double Parser::positive_number(const Item& item) const {
  const std::string s = text(item);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v <= 0) {
    fail(item, quoted(s) + " is not a positive number");
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
    fail(item, quoted(s) + " is not a duration (use 500ms, 1s, 1m, 1h or 1d)");
  }
  const auto per_unit = static_cast<std::uint64_t>(u->second);
  const auto longest = static_cast<std::uint64_t>(ratewin::Limit::kMaxInterval.count());
  if (ec != std::errc() || n > longest / per_unit)
    fail(item, quoted(s) + " is longer than 366 days");
  if (n == 0) fail(item, quoted(s) + " is not positive");
  return std::chrono::milliseconds(static_cast<std::int64_t>(n * per_unit));
}

template <typename T, std::size_t N>
T Parser::choice(const Item& item,
                 const std::array<std::pair<std::string_view, T>, N>& table) const {
  const std::string s = text(item);
  std::string names;
  for (const auto& [name, value] : table) {
    if (name == s) return value;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  fail(item, quoted(s) + " is not one of " + names);
}

std::size_t Parser::tier_ref(const Item& item) const {
  const std::string s = text(item);
  std::string names;
  for (std::size_t i = 0; i < data_->tiers.size(); ++i) {
    if (data_->tiers[i].name == s) return i;
    names += (names.empty() ? "" : ", ") + data_->tiers[i].name;
  }
  fail(item, "unknown tier " + quoted(s) +
                 (names.empty() ? " (no tiers are defined)" : " (tiers: " + names + ")"));
}

void Parser::check_unique(Seen& seen, const std::string& value, const Item& item,
                          std::string_view what) const {
  const auto [it, added] = seen.emplace(value, item.mark);
  if (!added) {
    fail(item, "duplicate " + std::string(what) + " " + quoted(value) + " (first at line " +
                   line_of(it->second) + ")");
  }
}

std::string Parser::endpoint_path(const Item& item) const {
  std::string p = text(item);
  if (p.front() != '/') fail(item, quoted(p) + " does not start with '/'");
  if (p.find('#') != std::string::npos) {
    fail(item, quoted(p) + " contains '#' (a fragment is never part of a request's path)");
  }
  // Requests are matched by their normalised path (path.h), so a path that a request
  // could not have, or that normalisation changes, could never match as written.
  // A glob's '?' is no query: checked as some byte that stays as it is.
  std::string plain = p;
  std::replace(plain.begin(), plain.end(), '?', 'Q');
  std::string fixed;
  std::string_view problem;
  if (!normalise_path(plain, fixed, problem)) {
    fail(item, quoted(p) + " is no path a request can have (" + std::string(problem) + ")");
  }
  if (fixed != plain) {
    fail(item, quoted(p) + " is not a normalised path" +
                   (plain == p ? " (write " + quoted(fixed) + ")"
                               : " (see path.h: decoded, but for space, '%', '#', non-ASCII)"));
  }
  return p;
}

const LimitRule& Parser::limit(const Item& item, const std::string& owner, bool scalable,
                               Mode mode, Seen& names) {
  const Fields f(*this, item,
                 {"name", "max", "window", "subintervals", "algorithm", "burst", "per",
                  "failure_policy", "cost", "mode"});
  const Item name_item = f.need("name");
  const std::string short_name = name(name_item);
  check_unique(names, short_name, name_item, "limit name");
  ratewin::LimitSpec spec;
  const Item max_item = f.need("max");
  spec.max = integer(max_item, 0, UINT64_MAX);
  const Item window_item = f.need("window");
  spec.interval = duration(window_item);
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
    const Item* at = &window_item;
    if (issue->field == ratewin::LimitField::max) at = &max_item;
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
                           (l.burst() != l.max() ? "burst " : "max ") +
                           std::to_string(l.burst()) + ": every request would be rejected");
    }
  }
  return data_->rules.emplace_back(
      LimitRule{std::move(name), l, scope, cost, scalable && scope != Scope::global});
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
    data_->keys.push_back({std::move(pattern), tier_ref(f.need("tier"))});
  }
}

void Parser::endpoints(const Item& item) {
  Seen seen;
  for (const Item& e : list(item, true)) {
    const Fields f(*this, e, {"name", "path", "methods", "limits"});
    Rules::Data::Endpoint endpoint;
    const Item name_item = f.need("name");
    endpoint.name = name(name_item);
    check_unique(seen, endpoint.name, name_item, "endpoint name");
    endpoint.path = endpoint_path(f.need("path"));
    endpoint.glob = endpoint.path.find_first_of("*?") != std::string::npos;
    if (!endpoint.glob) {
      endpoint.prefix = endpoint.path.ends_with('/')
                            ? endpoint.path.substr(0, endpoint.path.size() - 1)
                            : endpoint.path;
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
          fail(m, quoted(method) + " is not an HTTP method such as GET (methods are upper case)");
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

// Where each document of a stream starts; the events inside are of no interest.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

std::unique_ptr<const Rules::Data> Parser::run() {
  // YAML::LoadAll would do, but yaml-cpp 0.7 reads a document that starts with ',' as an
  // empty one without consuming anything, so LoadAll never returns. Instead: look at no
  // more than two documents, then load the first.
  const std::string input(bytes_);
  YAML::Node document;
  try {
    std::istringstream in(input);
    YAML::Parser parser(in);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts)) {
      const YAML::Mark& second = starts.marks.back();
      if (second.pos == starts.marks.front().pos) {
        fail(second, "", "YAML syntax: unexpected content at the start of a document");
      }
      fail(second, "", "more than one YAML document (a rules file holds one)");
    }
    document = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    fail(e.mark, "", "YAML syntax: " + e.msg);
  }
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
        fail(*v, quoted(label) +
                     " is not a label of up to 128 printable ASCII characters (it is sent in "
                     "HTTP headers)");
      }
    }
    if (const std::optional<Item> d = f.get("defaults"); d && !d->node.IsNull()) {
      const Fields defaults(*this, *d,
                            {"failure_policy", "algorithm", "mode", "shadow_headers"});
      if (const std::optional<Item> p = defaults.get("failure_policy")) {
        data_->default_policy = choice(*p, kPolicies);
      }
      if (const std::optional<Item> a = defaults.get("algorithm")) {
        data_->default_algorithm = choice(*a, kAlgorithms);
        default_algorithm_given_ = true;
      }
      if (const std::optional<Item> m = defaults.get("mode")) data_->default_mode = choice(*m, kModes);
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
        for (const Item& g : list(*l, true)) globs->push_back(key_pattern(g, true));
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

Rules Rules::load(const std::string& path) {
  const auto io_error = [&](const char* what) {
    return RulesError(path, 0, 0, what + std::error_code(errno, std::generic_category()).message());
  };
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) throw io_error("cannot open: ");
  std::string bytes;
  std::array<char, 65536> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), file.get())) > 0) {
    bytes.append(buf.data(), n);
    // A rules file is small; this stops a mistaken path like /dev/zero.
    if (bytes.size() > kMaxFileBytes) throw RulesError(path, 0, 0, "larger than 16 MiB");
  }
  if (std::ferror(file.get())) throw io_error("cannot read: ");
  return parse(bytes, path);
}
}  // namespace ratewin::server
