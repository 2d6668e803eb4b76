// Request paths as the rules see them (normalised), and globs.
#include "http/path.h"

#include <doctest/doctest.h>

#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>

#include "common/glob_set.h"
#include "rules/rules.h"

namespace doctest {
template <>
struct StringMaker<std::optional<std::string>> {
  static String convert(const std::optional<std::string>& value) {
    return value ? ("\"" + *value + "\"").c_str() : "refused";
  }
};
}  // namespace doctest

namespace ratewin::server {
namespace {

std::optional<std::string> normalised(std::string_view path) {
  std::string out;
  std::string_view problem;
  if (!normalise_path(path, out, problem)) {
    CHECK_FALSE(problem.empty());
    return std::nullopt;
  }
  return out;
}

TEST_CASE("loose_path: lower case, no dots or spaces ending a segment") {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"/", "/"},
      {"/API/X", "/api/x"},
      {"/api./x", "/api/x"},
      {"/api%20/x", "/api/x"},
      {"/api.%20.%20/x.", "/api/x"},
      {"/api/", "/api/"},
      {"/api./", "/api/"},
      {"/.../x", "/x"},
      {"/Caf%C3%A9", "/caf%c3%a9"},  // (both sides go through it alike)
      {"/v1/*/Search?", "/v1/*/search?"},
      {"/%20", "/"},
  };
  std::string out = "stale";
  for (const auto& [path, loose] : cases) {
    CAPTURE(path);
    loose_path(path, out);
    CHECK(out == loose);
    std::string again;
    loose_path(out, again);
    CHECK(again == out);  // a fixed point
  }
}

TEST_CASE("normalise_path: dot segments and slashes") {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"/", "/"},
      {"//", "/"},
      {"/a/b", "/a/b"},
      {"/a//b///c", "/a/b/c"},
      {"/a/b/", "/a/b/"},
      {"/a/./b/../c", "/a/c"},
      {"/a/b/..", "/a/"},
      {"/a/b/.", "/a/b/"},
      {"/a/b/../", "/a/"},
      {"/..", "/"},
      {"/../../a", "/a"},
      {"/a/../../b", "/b"},
      {"/a/..b/.c", "/a/..b/.c"},
      {"/a/.../b", "/a/.../b"},  // only "." and ".." are dot segments
      {"/a/b.", "/a/b."},
  };
  for (const auto& [in, out] : cases) {
    CAPTURE(in);
    CHECK(normalised(in) == out);
    CHECK(normalised(out) == out);
  }
}

// Every way of writing a path that backends read as the same resource normalises to one
// form, and every way that backends read differently (or that they disagree on) is
// refused.
TEST_CASE("normalise_path: percent-encoding, table of variants") {
  struct Variant {
    std::string_view in;
    std::optional<std::string_view> out;  // nullopt: refused (400)
  };
  const std::nullopt_t refused = std::nullopt;
  const Variant cases[] = {
      // Unreserved characters are decoded, whatever the case of the hex digits.
      {"/%61pi/x", "/api/x"},
      {"/%61%70%69/x", "/api/x"},
      {"/%41%50%49", "/API"},
      {"/a%7e", "/a~"},
      {"/a%7E", "/a~"},
      {"/%2D%2e%5F%7e", "/-._~"},
      // So are the others (backends such as nginx, Express and Go route on the decoded
      // path), but for those a path cannot hold as they are: they stay encoded, in upper
      // case.
      {"/a%20b", "/a%20b"},
      {"/a%7Cb", "/a|b"},
      {"/a%7cb", "/a|b"},
      {"/a|b", "/a|b"},
      {"/a%3fb", "/a%3Fb"},
      {"/a%23b", "/a%23b"},
      {"/a%2Ab", "/a*b"},
      {"/a%21b", "/a!b"},
      {"/caf%C3%A9", "/caf%C3%A9"},
      {"/caf%c3%a9", "/caf%C3%A9"},
      // Encoded dot segments are dot segments.
      {"/%2e%2e/x", "/x"},
      {"/a/%2E%2E/x", "/x"},
      {"/a/.%2E/x", "/x"},
      {"/a/%2e./x", "/x"},
      {"/a/%2e/x", "/a/x"},
      {"/a/x/%2e", "/a/x/"},
      {"/a/x/%2E%2e", "/a/"},
      // A percent sign stays encoded, so nothing is decoded twice: %252e is the three
      // characters "%2e", not a dot.
      {"/%252e%252e/x", "/%252e%252e/x"},
      {"/%2561pi", "/%2561pi"},
      {"/a%25", "/a%25"},
      {"/a%2525", "/a%2525"},
      // Invalid percent-encoding.
      {"/%zz", refused},
      {"/%4", refused},
      {"/%", refused},
      {"/a%2", refused},
      {"/a%g0", refused},
      {"/a%%41", refused},
      // Encoded '/' and '\': backends disagree on them (one splits, one does not).
      {"/a%2Fb", refused},
      {"/a%2fb", refused},
      {"/%2F%2Fadmin", refused},
      {"/a%5Cb", refused},
      {"/a%5cb", refused},
      {"/a\\b", refused},
      // Path parameters: ";" means a parameter to Tomcat and Spring, a byte to nginx.
      {"/a;b", refused},
      {"/a/b;jsessionid=1", refused},
      {"/;/a", refused},
      {"/a%3Bb", refused},
      {"/a%3bb", refused},
      // Encoded NUL and controls.
      {"/%00", refused},
      {"/a%00.json", refused},
      {"/a%0d%0aX:%20y", refused},
      {"/a%09", refused},
      {"/a%7F", refused},
      // Bytes that are not UTF-8: an overlong '/' or '.' must not become one.
      {"/%C0%AF", refused},
      {"/%c0%ae%c0%ae/x", refused},
      {"/%E0%80%AF", refused},
      {"/%FF", refused},
      {"/%C3", refused},
      // Raw bytes a request line cannot carry, and what is no path.
      {"", refused},
      {"a/b", refused},
      {"/a b", refused},
      {"/a#b", refused},
      {"/a\x01", refused},
      {"/\xc3\xa9", refused},
  };
  for (const Variant& v : cases) {
    CAPTURE(v.in);
    const std::optional<std::string> got = normalised(v.in);
    CHECK(got == v.out);
    if (got) CHECK(normalised(*got) == got);  // a fixed point
  }
}

// Random re-spellings of a path: unreserved bytes percent-encoded in either case, dot
// segments (plain and encoded) and doubled slashes added. Each must normalise to the
// path itself, so it matches the same endpoint.
std::string respell(std::string_view path, std::mt19937& random) {
  const auto chance = [&](int in) {
    return std::uniform_int_distribution<int>(0, in - 1)(random) == 0;
  };
  static constexpr std::string_view kDetours[] = {
      "/", "./", "%2e/", "%2E/", "junk/../", "junk/%2e%2e/", "j/.%2E/", "j%75nk/%2E./"};
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    out += c;
    if (c == '/' && i + 1 < path.size() && chance(2))
      out +=
          kDetours[std::uniform_int_distribution<std::size_t>(0, std::size(kDetours) - 1)(random)];
    if (c == '/') continue;
    if (chance(3)) {
      static constexpr char kUpper[] = "0123456789ABCDEF";
      static constexpr char kLower[] = "0123456789abcdef";
      const char* hex = chance(2) ? kUpper : kLower;
      out.back() = '%';
      out += hex[static_cast<unsigned char>(c) >> 4];
      out += hex[static_cast<unsigned char>(c) & 0xf];
    }
  }
  return out;
}

TEST_CASE("normalise_path: any spelling of a path matches the endpoint the path matches") {
  const Rules rules = Rules::parse(R"(
tiers:
  t:
    limits:
      - {name: a, max: 1, window: 1s}
default_tier: t
endpoints:
  - {name: admin, path: /admin, limits: [{name: a, max: 1, window: 1s}]}
  - {name: items, path: "/api/*/items", limits: [{name: a, max: 1, window: 1s}]}
  - {name: search, path: /api/v1/search, methods: [GET], limits: [{name: a, max: 1, window: 1s}]}
  - {name: login, path: /auth/login/, limits: [{name: a, max: 1, window: 1s}]}
  - {name: tilde, path: /~user/x-y_z.json, limits: [{name: a, max: 1, window: 1s}]}
)");
  const std::string_view paths[] = {
      "/admin",          "/admin/",
      "/admin/users/7",  "/api/v1/items",
      "/api/v2/x/items", "/api/items",
      "/api/v1/search",  "/api/v1/search/more",
      "/auth/login",     "/auth/login/x",
      "/other",          "/~user/x-y_z.json",
      "/administrator",  "/",
  };
  std::mt19937 random(20261124);
  Match expected;
  Match got;
  for (const std::string_view path : paths) {
    rules.match("k", "GET", path, expected);
    for (int i = 0; i < 200; ++i) {
      const std::string spelled = respell(path, random);
      CAPTURE(spelled);
      const std::optional<std::string> canonical = normalised(spelled);
      REQUIRE(canonical);
      CHECK(*canonical == path);
      rules.match("k", "GET", *canonical, got);
      CHECK(got.endpoint == expected.endpoint);
      // A trailing "/." or "/%2e" names the same directory: the same endpoint.
      rules.match("k", "GET", *normalised(spelled + (i % 2 == 0 ? "/." : "/%2E")), got);
      CHECK(got.endpoint == expected.endpoint);
    }
  }
}

TEST_CASE("glob_match") {
  CHECK(glob_match("", ""));
  CHECK_FALSE(glob_match("", "a"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("*", "anything/at/all"));
  CHECK(glob_match("**", "x"));
  CHECK_FALSE(glob_match("?", ""));
  CHECK(glob_match("?", "x"));
  CHECK_FALSE(glob_match("?", "xy"));
  CHECK(glob_match("a*b", "ab"));
  CHECK(glob_match("a*b", "axxb"));
  CHECK_FALSE(glob_match("a*b", "axxbc"));
  CHECK(glob_match("a*b*c", "abbbcbc"));
  CHECK(glob_match("*a", "aaa"));
  CHECK_FALSE(glob_match("*a", "aab"));
  CHECK(glob_match("/api/*/items", "/api/v1/items"));
  CHECK(glob_match("/api/*/items", "/api/a/b/items"));
  CHECK_FALSE(glob_match("/api/*/items", "/api/items"));
  CHECK(glob_match("key-????", "key-abcd"));
  CHECK_FALSE(glob_match("key-????", "key-abc"));
  CHECK(glob_match("*?", "x"));
  CHECK_FALSE(glob_match("*?", ""));
  CHECK(glob_match("a*", "a*"));  // no escapes: '*' in the text is an ordinary byte
  CHECK_FALSE(glob_match("abc", "ab"));
  // The classic exponential case for recursive matchers stays fast.
  const std::string text(5000, 'a');
  CHECK_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*b", text));
  CHECK(glob_match("*a*a*a*a*a*a*a*a*a*a*", text));
}

}  // namespace
}  // namespace ratewin::server
