// Request paths as the rules see them, and globs.
#include "path.h"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <utility>

namespace ratewin::server {
namespace {

TEST_CASE("normalise_path") {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"", "/"},
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
      {"a/b", "/a/b"},
      {"/a?x=/../b", "/a"},
      {"/a/?q", "/a/"},
      {"/a#frag/..", "/a"},
      {"/a/b?x#y", "/a/b"},
      {"?only", "/"},
      {"/%2e%2e/x", "/%2e%2e/x"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.first);
    CHECK(normalise_path(c.first) == c.second);
    CHECK(normalise_path(normalise_path(c.first)) == c.second);
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
