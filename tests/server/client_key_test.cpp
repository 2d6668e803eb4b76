// The client key by configuration (rules' defaults.client_key, a limit's client_key): the
// rules' spelling and its errors, and what a request's key comes out as.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "rules/rules.h"
#include "service/client.h"

namespace ratewin::server {
namespace {

std::string problem_of(const std::string& yaml) {
  try {
    Rules::parse(yaml, "rules.yaml");
  } catch (const RulesError& e) {
    return e.what();
  }
  return {};
}

Request request(std::vector<std::pair<std::string, std::string>> headers) {
  Request r;
  r.headers = std::move(headers);
  return r;
}

const AddressRanges kNoProxies;

IpAddress address(const char* text) { return *IpAddress::parse(text); }

TEST_CASE("client_key in the rules: defaults and a limit's own, described; the standard one unless set") {
  const Rules plain = Rules::parse("tiers: {free: {limits: [{name: a, max: 1, window: 1s}]}}\n");
  CHECK(&plain.client_key() == &ClientKeySpec::standard());
  CHECK(plain.describe_json().find(R"("client_key":["header:x-api-key","bearer","address"])") !=
        std::string::npos);

  const Rules rules = Rules::parse(
      "defaults:\n"
      "  client_key: [cookie:session, query:api_key, header:X-Tenant+address, address]\n"
      "tiers:\n"
      "  free:\n"
      "    limits:\n"
      "      - {name: a, max: 1, window: 1s}\n"
      "      - {name: per-user, max: 5, window: 1m, client_key: [header:X-User, address]}\n");
  const ClientKeySpec& spec = rules.client_key();
  REQUIRE(spec.alternatives.size() == 4);
  CHECK(spec.describe() == std::vector<std::string>{"cookie:session", "query:api_key",
                                                    "header:x-tenant+address", "address"});
  const std::vector<const LimitRule*> limits = rules.limits();
  CHECK(limits[0]->client_key == nullptr);
  REQUIRE(limits[1]->client_key != nullptr);
  CHECK(limits[1]->client_key->describe() == std::vector<std::string>{"header:x-user", "address"});
  CHECK(rules.describe_json().find(R"("client_key":["header:x-user","address"])") != std::string::npos);
  // Written as the standard order: the standard one.
  CHECK(&Rules::parse("defaults: {client_key: [header:x-api-key, bearer, address]}\n").client_key() ==
        &ClientKeySpec::standard());
}

TEST_CASE("client_key in the rules: what is refused, and where") {
  const std::string head = "tiers: {free: {limits: [{name: a, max: 1, window: 1s";
  for (const auto& [value, says] : std::vector<std::pair<std::string, std::string>>{
           {"[header]", "is not a client key's source"},
           {"[\"header:\"]", "is not a client key's source"},
           {"[header:]", "expected a string"},  // (YAML reads a mapping)
           {"[\"header:a b\"]", "is not a client key's source"},
           {"[cookie:a;b]", "is not a client key's source"},
           {"[query:a=b]", "is not a client key's source"},
           {"[address:x]", "is not a client key's source"},
           {"[token]", "is not a client key's source"},
           {"[\"address+\"]", "is not a client key's source"},
           {"[address+address]", "names one source twice"},
           {"[bearer, bearer]", "is listed twice"},
           {"[a1, a2, a3, a4, a5, a6, a7, a8, a9]", "at most 8 alternatives"},
           {"[header:a+header:b+header:c+header:d+header:e]", "at most 4 parts"},
           {"[]", "at least one source"},
       }) {
    CAPTURE(value);
    CHECK(problem_of("defaults: {client_key: " + value + "}\n" + head + "}]}}\n").find(says) !=
          std::string::npos);
  }
  CHECK(problem_of(head + ", per: global, client_key: [address]}]}}\n").find("no client key") !=
        std::string::npos);
}

TEST_CASE("a request's key: the first alternative it has every part of, else its address") {
  ClientIdentifier clients(kNoProxies);
  const Rules rules = Rules::parse(
      "defaults: {client_key: [cookie:session, query:api_key, header:X-Tenant+address, address]}\n");
  const ClientKeySpec& spec = rules.client_key();
  const IpAddress from = address("10.0.0.7");

  Client c = clients.identify(request({{"cookie", "theme=dark; session=\"abc123\" ; x=1"}}), "", from, spec);
  CHECK(c.kind == Client::Kind::api_key);
  CHECK(c.key == "abc123");
  CHECK(c.counted == "abc123");
  c = clients.identify(request({}), "page=2&api_key=K%20Y&x", from, spec);
  CHECK(c.key == "K%20Y");  // as sent
  c = clients.identify(request({{"x-tenant", " acme "}}), "api_key=", from, spec);  // empty: none
  CHECK(c.key == "acme|ip:10.0.0.7");
  c = clients.identify(request({{"cookie", "session="}, {"x-api-key", "ignored"}}), "", from, spec);
  CHECK(c.kind == Client::Kind::address);
  CHECK(c.key == "ip:10.0.0.7");
  // An IPv6 address in a combination counts by its prefix, as an address client does.
  c = clients.identify(request({{"x-tenant", "acme"}}), "", address("2001:db8::1:2"), spec);
  CHECK(c.key == "acme|ip:2001:db8::/64");

  // The standard order, by the same walk or the short one.
  const Rules standard = Rules::parse("defaults: {client_key: [header:X-API-Key, bearer, address]}\n");
  for (const ClientKeySpec* s : {&ClientKeySpec::standard(), &standard.client_key()}) {
    CHECK(clients.identify(request({{"x-api-key", " k1 "}}), "", from, *s).key == "k1");
    CHECK(clients.identify(request({{"authorization", "Bearer t1"}}), "", from, *s).key == "t1");
    CHECK(clients.identify(request({}), "", from, *s).key == "ip:10.0.0.7");
  }
}

TEST_CASE("a limit's own key: tagged as the counters name it, the address when the request has none") {
  ClientIdentifier clients(kNoProxies);
  const Rules rules = Rules::parse(
      "tiers: {free: {limits: [{name: u, max: 1, window: 1s, client_key: [header:X-User]}]}}\n");
  const ClientKeySpec& spec = *rules.limits()[0]->client_key;
  std::string key;
  clients.tagged_key(request({{"x-user", "u42"}}), "", address("10.0.0.7"), spec, key);
  CHECK(key == "ku42");
  clients.tagged_key(request({}), "", address("10.0.0.7"), spec, key);
  CHECK(key == "aip:10.0.0.7");
  clients.tagged_key(request({}), "", address("2001:db8::9"), spec, key);
  CHECK(key == "aip:2001:db8::/64");
}

}  // namespace
}  // namespace ratewin::server
