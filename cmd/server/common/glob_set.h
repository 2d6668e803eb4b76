// glob_set.h: glob_match, and a list of globs matched in time that does not grow
// with the list's length, for the rules' allow, deny and key lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ratewin::server {

// Whether `text` matches `pattern` as a whole: '*' matches any run of bytes (including
// '/'), '?' exactly one byte, everything else itself; there is no escape. Iterative,
// O(pattern * text) at worst.
bool glob_match(std::string_view pattern, std::string_view text);

// Entries are indexed by their literal head (the text before the first '*' or '?'; the
// whole glob when it has none) and, for those that start with a wildcard, by their literal
// tail (after the last one). A text is then tried only against the entries whose head is
// one of its prefixes (one hash lookup per distinct head length up to the text's length)
// or whose tail is one of its suffixes: 300,000 exact keys, address prefixes and
// "*-suffix" globs cost a few lookups, where a list walked them all. Only entries that
// start and end with a wildcard ("*", "*bot*", "?x*") are tried one by one.
class GlobSet {
 public:
  // Appends `glob`: its index is size() before the call.
  void add(std::string glob);

  // The lowest index of an entry that matches `text` as a whole; nullopt when none does.
  std::optional<std::size_t> first(std::string_view text) const;
  // Whether any entry matches `text` (it stops at the first found).
  bool any(std::string_view text) const;

  std::size_t size() const noexcept { return globs_.size(); }
  bool empty() const noexcept { return globs_.empty(); }
  // The entries, in the order they were added.
  const std::vector<std::string>& globs() const noexcept { return globs_; }

 private:
  // Entries by the hash of a literal part (a collision only adds a candidate: every
  // candidate is checked with glob_match), with the distinct lengths of those parts.
  struct Index {
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> entries;
    std::vector<std::size_t> lengths;  // ascending
    void add(std::string_view part, std::uint32_t entry);
  };

  // The lowest matching index (or, with `any`, the first found); SIZE_MAX when none.
  std::size_t search(std::string_view text, bool any) const;

  std::vector<std::string> globs_;
  Index heads_;
  Index tails_;                        // entries whose head is empty
  std::vector<std::uint32_t> floating_;  // entries with neither a head nor a tail
};

}  // namespace ratewin::server
