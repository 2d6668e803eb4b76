// GlobSet: a glob list matched through its index gives what walking the list gives.
#include "common/glob_set.h"

#include <doctest/doctest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "http/path.h"

namespace ratewin::server {
namespace {

// What a list walked in order gives: the first entry that matches.
std::optional<std::size_t> walked(const std::vector<std::string>& globs, std::string_view text) {
  for (std::size_t i = 0; i < globs.size(); ++i)
    if (glob_match(globs[i], text)) return i;
  return std::nullopt;
}

TEST_CASE("GlobSet: exact entries, heads, tails and floating globs, first match wins") {
  GlobSet set;
  const std::vector<std::string> globs = {"ip:10.6.6.6", "revoked-*", "*-bot", "ip:10.6.*",
                                          "a?c",         "*",         "x*y",   "*mid*", ""};
  for (const std::string& g : globs) set.add(g);
  CHECK(set.size() == globs.size());
  CHECK(set.globs() == globs);
  CHECK(set.first("ip:10.6.6.6") == 0);
  CHECK(set.first("revoked-42") == 1);
  CHECK(set.first("crawler-bot") == 2);
  CHECK(set.first("ip:10.6.1.2") == 3);
  CHECK(set.first("abc") == 4);
  CHECK(set.first("xzzy") == 5);  // "*" comes before "x*y"
  CHECK(set.first("") == 5);
  CHECK(set.any("anything"));

  GlobSet narrow;
  for (const char* g : {"x*y", "*mid*", "", "pre*", "*post"}) narrow.add(g);
  CHECK(narrow.first("xay") == 0);
  CHECK(narrow.first("amidst") == 1);
  CHECK(narrow.first("") == 2);
  CHECK(narrow.first("prepost") == 3);
  CHECK(narrow.first("apost") == 4);
  CHECK_FALSE(narrow.first("pr"));
  CHECK_FALSE(narrow.any("nothing"));
  CHECK_FALSE(GlobSet().any(""));
}

TEST_CASE("GlobSet: random lists agree with walking them") {
  std::mt19937_64 random(20261127);
  const std::string alphabet = "ab.*?";
  const auto word = [&](std::size_t most, bool wild) {
    std::string w(random() % (most + 1), 'a');
    for (char& c : w) c = alphabet[random() % (wild ? alphabet.size() : 3)];
    return w;
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> globs(1 + random() % 40);
    GlobSet set;
    for (std::string& g : globs) {
      g = word(6, true);
      set.add(g);
    }
    for (int i = 0; i < 200; ++i) {
      const std::string text = word(8, false);
      CAPTURE(text);
      CHECK(set.first(text) == walked(globs, text));
      CHECK(set.any(text) == walked(globs, text).has_value());
    }
  }
}

}  // namespace
}  // namespace ratewin::server
