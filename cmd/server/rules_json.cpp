// The active rules as JSON, for GET /admin/rules.
#include "rules_data.h"

namespace ratewin::server {

namespace {

template <typename T, std::size_t N>
std::string_view name_of(const std::array<std::pair<std::string_view, T>, N>& table, T value) {
  for (const auto& [name, v] : table) {
    if (v == value) return name;
  }
  return "?";
}

void append_strings(std::string& out, const std::vector<std::string>& strings) {
  out += '[';
  for (const std::string& s : strings) {
    if (out.back() != '[') out += ',';
    append_json_string(out, s);
  }
  out += ']';
}

void append_limits(std::string& out, const std::vector<const LimitRule*>& rules) {
  out += '[';
  for (const LimitRule* r : rules) {
    if (out.back() != '[') out += ',';
    out += "{\"name\":";
    append_json_string(out, r->name);
    out += ",\"max\":" + std::to_string(r->limit.max());
    out += ",\"window_ms\":" + std::to_string(r->limit.interval().count());
    out += ",\"subintervals\":" + std::to_string(r->limit.subintervals());
    out += ",\"algorithm\":\"" + std::string(name_of(kAlgorithms, r->limit.algorithm())) + "\"";
    if (r->limit.algorithm() == Algorithm::token_bucket)
      out += ",\"burst\":" + std::to_string(r->limit.burst());
    out += ",\"per\":\"" + std::string(name_of(kScopes, r->scope)) + "\"";
    out += ",\"failure_policy\":\"" + std::string(name_of(kPolicies, r->limit.failure_policy())) +
           "\"";
    out += ",\"cost\":" + std::to_string(r->cost);
    out += ",\"mode\":\"" + std::string(name_of(kModes, r->limit.mode())) + "\"";
    out += ",\"limit\":";
    append_json_string(out, r->limit.to_string());
    if (r->client_key != nullptr) {
      out += ",\"client_key\":";
      append_strings(out, r->client_key->describe());
    }
    out += '}';
  }
  out += ']';
}
}  // namespace

std::string Rules::describe_json() const {
  const Data& d = *data_;
  std::string out = "{\"version\":";
  append_json_string(out, d.version);
  out += ",\"defaults\":{\"failure_policy\":\"" +
         std::string(name_of(kPolicies, d.default_policy)) + "\",\"algorithm\":\"" +
         std::string(name_of(kAlgorithms, d.default_algorithm)) + "\",\"mode\":\"" +
         std::string(name_of(kModes, d.default_mode)) + "\",\"shadow_headers\":" +
         (d.shadow_headers ? "true" : "false") + ",\"client_key\":";
  append_strings(out, d.client_key.describe());
  out += '}';
  out += ",\"tiers\":{";
  for (const Data::Tier& t : d.tiers) {
    if (out.back() != '{') out += ',';
    append_json_string(out, t.name);
    out += ":{\"limits\":";
    append_limits(out, t.limits);
    out += '}';
  }
  out += "},\"default_tier\":";
  if (d.default_tier) {
    append_json_string(out, d.tiers[*d.default_tier].name);
  } else {
    out += "null";
  }
  out += ",\"keys\":[";
  for (std::size_t i = 0; i < d.keys.size(); ++i) {
    if (out.back() != '[') out += ',';
    out += "{\"match\":";
    append_json_string(out, d.keys.globs()[i]);
    out += ",\"tier\":";
    append_json_string(out, d.tiers[d.key_tiers[i]].name);
    out += '}';
  }
  out += "],\"endpoints\":[";
  for (const Data::Endpoint& e : d.endpoints) {
    if (out.back() != '[') out += ',';
    out += "{\"name\":";
    append_json_string(out, e.name);
    out += ",\"path\":";
    append_json_string(out, e.path);
    out += e.glob ? ",\"match\":\"glob\"" : ",\"match\":\"prefix\"";
    out += e.loose ? ",\"path_match\":\"loose\"" : ",\"path_match\":\"exact\"";
    out += ",\"methods\":";
    if (e.methods.empty()) {
      out += "null";
    } else {
      append_strings(out, e.methods);
    }
    out += ",\"limits\":";
    append_limits(out, e.limits);
    out += '}';
  }
  out += "],\"overrides\":[";
  for (const Data::Override& o : d.overrides) {
    if (out.back() != '[') out += ',';
    out += "{\"key\":";
    append_json_string(out, o.key);
    out += ",\"tier\":";
    if (o.tier) {
      append_json_string(out, d.tiers[*o.tier].name);
    } else {
      out += "null";
    }
    out +=
        ",\"multiplier\":" + (o.multiplier ? to_json_number(*o.multiplier) : std::string("null"));
    out += ",\"limits\":";
    if (o.limits) {
      append_limits(out, *o.limits);
    } else {
      out += "null";
    }
    out += '}';
  }
  out += "],\"allow\":";
  append_strings(out, d.allow.globs());
  out += ",\"deny\":";
  append_strings(out, d.deny.globs());
  out += ",\"limit_count\":" + std::to_string(d.rules.size()) + "}";
  return out;
}
}  // namespace ratewin::server
