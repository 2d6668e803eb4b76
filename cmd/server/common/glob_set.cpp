#include "common/glob_set.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>

namespace ratewin::server {

bool glob_match(std::string_view pattern, std::string_view text) {
  // On a mismatch, backtrack to the latest '*' and let it swallow one more byte; earlier
  // stars never need revisiting, which bounds the work by pattern * text.
  std::size_t p = 0;
  std::size_t t = 0;
  std::size_t star = std::string_view::npos;
  std::size_t star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

std::uint64_t hash_of(std::string_view part) noexcept { return std::hash<std::string_view>{}(part); }

}  // namespace

void GlobSet::Index::add(std::string_view part, std::uint32_t entry) {
  entries[hash_of(part)].push_back(entry);
  const auto at = std::lower_bound(lengths.begin(), lengths.end(), part.size());
  if (at == lengths.end() || *at != part.size()) lengths.insert(at, part.size());
}

void GlobSet::add(std::string glob) {
  if (globs_.size() >= std::numeric_limits<std::uint32_t>::max())
    throw std::length_error("ratewin: too many globs in one list");
  const auto entry = static_cast<std::uint32_t>(globs_.size());
  const std::string_view g = glob;
  const std::size_t first_wild = g.find_first_of("*?");
  if (first_wild != 0) {
    heads_.add(g.substr(0, first_wild), entry);  // (npos: the whole glob)
  } else {
    const std::size_t last_wild = g.find_last_of("*?");
    if (last_wild + 1 < g.size()) {
      tails_.add(g.substr(last_wild + 1), entry);
    } else {
      floating_.push_back(entry);
    }
  }
  globs_.push_back(std::move(glob));
}

std::size_t GlobSet::search(std::string_view text, bool any) const {
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  std::size_t best = kNone;
  // (True once the search can stop.)
  const auto consider = [&](std::uint32_t entry) {
    if (entry < best && glob_match(globs_[entry], text)) best = entry;
    return any && best != kNone;
  };
  const auto lookup = [&](const Index& index, bool from_start) {
    for (const std::size_t length : index.lengths) {
      if (length > text.size()) break;
      const std::string_view part =
          from_start ? text.substr(0, length) : text.substr(text.size() - length);
      const auto it = index.entries.find(hash_of(part));
      if (it == index.entries.end()) continue;
      for (const std::uint32_t entry : it->second)
        if (consider(entry)) return true;
    }
    return false;
  };
  if (lookup(heads_, true) || lookup(tails_, false)) return best;
  for (const std::uint32_t entry : floating_) {
    if (entry >= best) break;  // (in ascending order)
    if (consider(entry)) break;
  }
  return best;
}

std::optional<std::size_t> GlobSet::first(std::string_view text) const {
  const std::size_t found = search(text, false);
  if (found == std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return found;
}

bool GlobSet::any(std::string_view text) const {
  return search(text, true) != std::numeric_limits<std::size_t>::max();
}

}  // namespace ratewin::server
