// The active rules as JSON, for GET /admin/rules.
#include "common/json_writer.h"
#include "rules/rules_data.h"

namespace ratewin::server {

namespace {

template <typename T, std::size_t N>
std::string_view name_of(const std::array<std::pair<std::string_view, T>, N>& table, T value) {
  for (const auto& [name, v] : table) {
    if (v == value) return name;
  }
  return "?";
}

JsonWriter& write_strings(JsonWriter& w, const std::vector<std::string>& strings) {
  w.begin_array();
  for (const std::string& s : strings) w.string(s);
  return w.end_array();
}

JsonWriter& write_limits(JsonWriter& w, const std::vector<const LimitRule*>& rules) {
  w.begin_array();
  for (const LimitRule* r : rules) {
    const Limit& limit = r->limit;
    w.begin_object().key("name").string(r->name);
    w.key("max").number(limit.max());
    w.key("window_ms").number(limit.interval().count());
    w.key("subintervals").number(limit.subintervals());
    w.key("algorithm").string(name_of(kAlgorithms, limit.algorithm()));
    if (limit.algorithm() == Algorithm::token_bucket) w.key("burst").number(limit.burst());
    w.key("per").string(name_of(kScopes, r->scope));
    w.key("failure_policy").string(name_of(kPolicies, limit.failure_policy()));
    w.key("cost").number(r->cost);
    w.key("mode").string(name_of(kModes, limit.mode()));
    w.key("limit").string(limit.to_string());
    if (r->client_key != nullptr) write_strings(w.key("client_key"), r->client_key->describe());
    w.end_object();
  }
  return w.end_array();
}
}  // namespace

std::string Rules::describe_json() const {
  const Data& d = *data_;
  std::string out;
  JsonWriter w(out);
  w.begin_object().key("version").string(d.version);
  w.key("defaults").begin_object();
  w.key("failure_policy").string(name_of(kPolicies, d.default_policy));
  w.key("algorithm").string(name_of(kAlgorithms, d.default_algorithm));
  w.key("mode").string(name_of(kModes, d.default_mode));
  w.key("shadow_headers").boolean(d.shadow_headers);
  write_strings(w.key("client_key"), d.client_key.describe());
  w.end_object();
  w.key("tiers").begin_object();
  for (const Data::Tier& t : d.tiers) {
    w.key(t.name).begin_object();
    write_limits(w.key("limits"), t.limits);
    w.end_object();
  }
  w.end_object();
  w.key("default_tier");
  d.default_tier ? w.string(d.tiers[*d.default_tier].name) : w.null();
  w.key("keys").begin_array();
  for (std::size_t i = 0; i < d.keys.size(); ++i) {
    w.begin_object().key("match").string(d.keys.globs()[i]);
    w.key("tier").string(d.tiers[d.key_tiers[i]].name);
    w.end_object();
  }
  w.end_array();
  w.key("endpoints").begin_array();
  for (const Data::Endpoint& e : d.endpoints) {
    w.begin_object().key("name").string(e.name);
    w.key("path").string(e.path);
    w.key("match").string(e.glob ? "glob" : "prefix");
    w.key("path_match").string(e.loose ? "loose" : "exact");
    w.key("methods");
    e.methods.empty() ? w.null() : write_strings(w, e.methods);
    write_limits(w.key("limits"), e.limits);
    w.end_object();
  }
  w.end_array();
  w.key("overrides").begin_array();
  for (const Data::Override& o : d.overrides) {
    w.begin_object().key("key").string(o.key);
    w.key("tier");
    o.tier ? w.string(d.tiers[*o.tier].name) : w.null();
    w.key("multiplier");
    o.multiplier ? w.number(*o.multiplier) : w.null();
    w.key("limits");
    o.limits ? write_limits(w, *o.limits) : w.null();
    w.end_object();
  }
  w.end_array();
  write_strings(w.key("allow"), d.allow.globs());
  write_strings(w.key("deny"), d.deny.globs());
  w.key("limit_count").number(d.rules.size());
  w.end_object();
  return out;
}
}  // namespace ratewin::server
