// yaml_reader.h: reading a YAML configuration (the rules file, envoyproxy/ratelimit's
// descriptor files) with every problem reported as a RulesError naming the source, the
// line and the field: the shared part of their parsers.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/rules_error.h"

namespace ratewin::server {

// A node and where it is, for error messages.
struct YamlItem {
  YAML::Node node;
  YAML::Mark mark;   // yaml-cpp marks an empty value at the next token, so for one of
                     // those this is its key's mark
  std::string path;  // "tiers.free.limits[0].window"; "" for the root
};

// A value for an error message: quoted, escaped, and cut short if long.
std::string quoted_value(std::string_view s);
// "a mapping", "a list", "nothing", or the scalar quoted.
std::string kind_of(const YAML::Node& node);
// A mark's 1-based line.
std::string line_of(const YAML::Mark& mark);

// A file's bytes (at most max_bytes; a RulesError without position otherwise, or when it
// cannot be read).
std::string read_config_file(const std::string& path, std::size_t max_bytes);

class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  // The one document of `bytes` (a null node when empty). More than one document, or bad
  // syntax, is a RulesError. It also sets the bound on the nodes entries() and list() may
  // hand out for it: 10000 + 4 per byte. A file without aliases stays far below; aliases
  // of aliases (a kilobyte that reads as millions of nodes) are refused at the bound.
  YAML::Node document(const std::string& bytes) const;

  struct Entry {
    std::string name;
    YamlItem key;
    YamlItem value;
  };
  // Names met so far in a list, with where, to report duplicates.
  using Seen = std::map<std::string, YAML::Mark, std::less<>>;

  // The fields of a mapping with a fixed set of names: any other is an error naming the
  // expected ones.
  class Fields {
   public:
    Fields(const YamlReader& reader, const YamlItem& map,
           std::initializer_list<std::string_view> known);
    std::optional<YamlItem> get(std::string_view name) const;
    YamlItem need(std::string_view name) const;

   private:
    const YamlReader& reader_;
    YamlItem map_;
    std::vector<Entry> entries_;
  };

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& path,
                         const std::string& problem) const;
  [[noreturn]] void fail(const YamlItem& at, const std::string& problem) const {
    fail(at.mark, at.path, problem);
  }

  // A mapping's entries in order (string names, none twice).
  std::vector<Entry> entries(const YamlItem& map, std::string_view what = "field") const;
  // A list's elements (nothing counts as an empty list when empty_ok).
  std::vector<YamlItem> list(const YamlItem& item, bool empty_ok = false) const;
  // A string: not empty, valid UTF-8, no control characters.
  std::string text(const YamlItem& item) const;
  // A scalar as written, possibly empty (nothing gives "").
  std::string scalar(const YamlItem& item) const;
  std::uint64_t integer(const YamlItem& item, std::uint64_t lo, std::uint64_t hi) const;
  // true/false (and YAML 1.1's yes/no/on/off, as yaml-cpp reads them).
  bool boolean(const YamlItem& item) const;
  template <typename T, std::size_t N>
  T choice(const YamlItem& item, const std::array<std::pair<std::string_view, T>, N>& table) const {
    const std::string s = text(item);
    std::string names;
    for (const auto& [name, value] : table) {
      if (name == s) return value;
      names += (names.empty() ? "" : ", ") + std::string(name);
    }
    fail(item, quoted_value(s) + " is not one of " + names);
  }
  void check_unique(Seen& seen, const std::string& value, const YamlItem& item,
                    std::string_view what) const;

  const std::string& source() const noexcept { return source_; }

 private:
  // Counts `n` more nodes handed out; a RulesError at `at` past the bound.
  void count_nodes(const YamlItem& at, std::size_t n) const;

  std::string source_;
  mutable std::size_t nodes_ = 0;
  mutable std::size_t max_nodes_ = 0;  // 0: no bound (no document() read)
};

}  // namespace ratewin::server
