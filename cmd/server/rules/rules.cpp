// The rules' model and the matcher: from a request's key, method and path to the limits
// it counts against, and the resource names they are counted under. The YAML parser is
// rules_yaml.cpp; the JSON description, rules_json.cpp.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <variant>

#include "ratewin/hash.h"
#include "rules/rules_data.h"

namespace ratewin::server {

bool parse_failure_policy(std::string_view name, FailurePolicy& out) noexcept {
  for (const auto& [n, policy] : kPolicies) {
    if (n == name) {
      out = policy;
      return true;
    }
  }
  return false;
}

std::string version_of(std::string_view label, std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string v(label);
  v += '@';
  const std::uint64_t h = hash(bytes);
  for (int shift = 60; shift >= 0; shift -= 4) v += kHex[(h >> shift) & 0xf];
  return v;
}

Rules::Rules() {
  auto data = std::make_unique<Data>();
  data->version = version_of("unversioned", "");
  data_ = std::move(data);
  find_key_headers();
}

Rules::Rules(std::unique_ptr<const Data> data) : data_(std::move(data)) { find_key_headers(); }

void Rules::find_key_headers() {
  const auto add = [this](const ClientKeySpec& spec) {
    for (const auto& alternative : spec.alternatives) {
      for (const ClientKeySource& part : alternative) {
        if (part.kind != ClientKeySource::Kind::header) continue;
        if (std::find(key_headers_.begin(), key_headers_.end(), part.name) == key_headers_.end())
          key_headers_.push_back(part.name);
      }
    }
  };
  add(client_key());
  for (const ClientKeySpec& own : data_->limit_keys) add(own);
}
Rules::~Rules() = default;

Rules::Rules(Rules&&) noexcept = default;
Rules& Rules::operator=(Rules&&) noexcept = default;

void Rules::match(std::string_view key, std::string_view method, std::string_view path,
                  Match& out) const {
  const Data& d = *data_;
  out.limits.clear();
  out.multiplier = 1.0;
  const Data::Endpoint* endpoint = d.endpoint_for(method, path, out.loose_path);
  out.endpoint = endpoint != nullptr ? std::string_view(endpoint->name) : std::string_view();
  const Data::Resolved who = d.resolve(key);
  out.tier = who.tier != nullptr ? std::string_view(who.tier->name) : std::string_view();

  if (d.deny.any(key)) {
    out.action = Action::deny;
    return;
  }
  if (d.allow.any(key)) {
    out.action = Action::allow;
    return;
  }
  out.action = Action::limit;
  if (const std::vector<const LimitRule*>* own = Data::key_limits(who)) {
    out.limits.insert(out.limits.end(), own->begin(), own->end());
    out.multiplier = Data::multiplier(who);
  }
  if (endpoint != nullptr)
    out.limits.insert(out.limits.end(), endpoint->limits.begin(), endpoint->limits.end());
}

const std::string& Rules::version() const { return data_->version; }

std::size_t Rules::limit_count() const { return data_->rules.size(); }

bool Rules::says_nothing() const {
  return data_->rules.empty() && data_->allow.empty() && data_->deny.empty();
}

bool Rules::shadow_headers() const { return data_->shadow_headers; }

const ClientKeySpec& Rules::client_key() const {
  // (The standard one itself, which ClientIdentifier reads without the general walk.)
  return data_->standard_client_key ? ClientKeySpec::standard() : data_->client_key;
}

const ClientKeySpec& ClientKeySpec::standard() {
  using K = ClientKeySource::Kind;
  static const ClientKeySpec spec{
      {{{K::header, "x-api-key"}}, {{K::bearer, ""}}, {{K::address, ""}}}};
  return spec;
}

std::vector<std::string> ClientKeySpec::describe() const {
  std::vector<std::string> out;
  for (const auto& alternative : alternatives) {
    std::string text;
    for (const ClientKeySource& part : alternative) {
      if (!text.empty()) text += '+';
      switch (part.kind) {
        case ClientKeySource::Kind::header: text += "header:" + part.name; break;
        case ClientKeySource::Kind::cookie: text += "cookie:" + part.name; break;
        case ClientKeySource::Kind::query: text += "query:" + part.name; break;
        case ClientKeySource::Kind::bearer: text += "bearer"; break;
        case ClientKeySource::Kind::address: text += "address"; break;
      }
    }
    out.push_back(std::move(text));
  }
  return out;
}

std::vector<const LimitRule*> Rules::limits() const {
  std::vector<const LimitRule*> out;
  out.reserve(data_->rules.size());
  for (const LimitRule& rule : data_->rules) out.push_back(&rule);
  return out;
}
std::vector<std::string_view> Rules::endpoint_names() const {
  std::vector<std::string_view> out;
  out.reserve(data_->endpoints.size());
  for (const Data::Endpoint& e : data_->endpoints) out.emplace_back(e.name);
  return out;
}

std::uint64_t max_from(double count) noexcept {
  const double whole = std::floor(count);
  constexpr auto kMax = static_cast<double>(ratewin::Limit::kMaxCount);
  // Written so that NaN lands on 1.
  return !(whole >= 1)   ? 1
         : whole >= kMax ? ratewin::Limit::kMaxCount
                         : static_cast<std::uint64_t>(whole);
}

ratewin::Limit with_scaled_max(const ratewin::Limit& limit, std::uint64_t max) {
  using ratewin::Limit;
  // A log holds at most kMaxLogCount entries: a multiplier takes it no further.
  if (limit.algorithm() == Algorithm::sliding_log)
    return limit.with_max(std::min(max, Limit::kMaxLogCount));
  if (limit.algorithm() != Algorithm::token_bucket) return limit.with_max(max);
  __extension__ typedef unsigned __int128 u128;
  constexpr std::uint64_t kLongest = Limit::kMaxResolution.count() * std::uint64_t{1'000'000};
  const auto window = static_cast<std::uint64_t>(limit.interval().count()) * 1'000'000;
  // At least one unit refilled in kMaxResolution.
  max = std::max(max, (window + kLongest - 1) / kLongest);
  // The burst in proportion, and at most what refills in kMaxResolution (the rounding of
  // emission_ns() up can take it just past).
  const u128 scaled = static_cast<u128>(limit.burst()) * max / limit.max();
  const auto emission = static_cast<std::uint64_t>(Limit(max, limit.interval()).emission_ns());
  const std::uint64_t most = std::min<std::uint64_t>(Limit::kMaxCount, kLongest / emission);
  const std::uint64_t burst = scaled == 0     ? 1
                              : scaled > most ? most
                                              : static_cast<std::uint64_t>(scaled);
  // Made afresh: with_max() would keep the burst, and refuse a bucket that refills it
  // too slowly. (Valid by construction: max and burst refill within the bound.)
  ratewin::LimitSpec spec = limit.spec();
  spec.max = max;
  spec.burst = burst;
  spec.scope = limit.scope();
  return std::get<Limit>(Limit::from_spec(spec));
}

ratewin::Limit effective_limit(const LimitRule& rule, double multiplier) {
  if (!rule.scales || multiplier == 1.0) return rule.limit;
  return with_scaled_max(rule.limit, max_from(static_cast<double>(rule.limit.max()) * multiplier));
}

void resource_name(const LimitRule& rule, std::string_view key, std::string_view endpoint,
                   std::string& out) {
  // The length prefix makes the rule name self-delimiting (an override's name holds its
  // key, which may contain anything); endpoint names cannot contain '|'.
  out.clear();
  append_number(out, rule.name.size());
  out += ':';
  out += rule.name;
  if (rule.scope == Scope::endpoint) {
    out += "|e=";
    out += endpoint;
  }
  if (rule.scope != Scope::global) {
    out += "|k=";
    out += key;
  }
}
}  // namespace ratewin::server
