#include "common/yaml_reader.h"

#include <yaml-cpp/eventhandler.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <memory>
#include <sstream>
#include <system_error>

#include "common/text.h"

namespace ratewin::server {

namespace {

std::string join(const std::string& path, std::string_view name) {
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}

// Where each document of a stream starts; the events inside are of no interest.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::string quoted_value(std::string_view s) {
  constexpr std::size_t kMax = 60;
  std::string out;
  if (s.size() <= kMax) {
    append_json_string(out, s);
    return out;
  }
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  append_json_string(out, std::string(s.substr(0, cut)) + "...");
  return out;
}

std::string line_of(const YAML::Mark& mark) { return std::to_string(mark.line + 1); }

std::string kind_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return quoted_value(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string read_config_file(const std::string& path, std::size_t max_bytes) {
  const auto io_error = [&](const char* what) {
    return RulesError(path, 0, 0, what + std::error_code(errno, std::generic_category()).message());
  };
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) throw io_error("cannot open: ");
  std::string bytes;
  std::array<char, 65536> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), file.get())) > 0) {
    bytes.append(buf.data(), n);
    // A configuration is small; this stops a mistaken path like /dev/zero.
    if (bytes.size() > max_bytes) {
      throw RulesError(path, 0, 0, "larger than " + std::to_string(max_bytes >> 20) + " MiB");
    }
  }
  if (std::ferror(file.get())) throw io_error("cannot read: ");
  return bytes;
}

YAML::Node YamlReader::document(const std::string& input) const {
  // YAML::LoadAll would do, but yaml-cpp 0.7 reads a document that starts with ',' as an
  // empty one without consuming anything, so LoadAll never returns. Instead: look at no
  // more than two documents, then load the first.
  try {
    std::istringstream in(input);
    YAML::Parser parser(in);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts)) {
      const YAML::Mark& second = starts.marks.back();
      if (second.pos == starts.marks.front().pos) {
        fail(second, "", "YAML syntax: unexpected content at the start of a document");
      }
      fail(second, "", "more than one YAML document (a file holds one)");
    }
    nodes_ = 0;
    max_nodes_ = 10'000 + 4 * input.size();
    return YAML::Load(input);
  } catch (const YAML::Exception& e) {
    fail(e.mark, "", "YAML syntax: " + e.msg);
  }
}

YamlReader::Fields::Fields(const YamlReader& reader, const YamlItem& map,
                           std::initializer_list<std::string_view> known)
    : reader_(reader), map_(map), entries_(reader.entries(map)) {
  for (const Entry& e : entries_) {
    if (std::find(known.begin(), known.end(), e.name) != known.end()) continue;
    std::string expected;
    for (const std::string_view k : known)
      expected += (expected.empty() ? "" : ", ") + std::string(k);
    reader.fail(e.key,
                "unknown field " + quoted_value(e.name) + " (expected one of: " + expected + ")");
  }
}

std::optional<YamlItem> YamlReader::Fields::get(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}

YamlItem YamlReader::Fields::need(std::string_view name) const {
  if (std::optional<YamlItem> item = get(name)) return std::move(*item);
  reader_.fail(map_, "missing field \"" + std::string(name) + "\"");
}

void YamlReader::fail(const YAML::Mark& mark, const std::string& path,
                      const std::string& problem) const {
  // yaml-cpp's marks are 0-based, and -1 when it has none.
  throw RulesError(source_, mark.line < 0 ? 0 : mark.line + 1, mark.line < 0 ? 0 : mark.column + 1,
                   path.empty() ? problem : path + ": " + problem);
}

std::vector<YamlReader::Entry> YamlReader::entries(const YamlItem& map,
                                                   std::string_view what) const {
  if (!map.node.IsMap()) fail(map, "expected a mapping, got " + kind_of(map.node));
  count_nodes(map, map.node.size());
  std::vector<Entry> out;
  Seen seen;
  for (auto it = map.node.begin(); it != map.node.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar())
      fail(key.Mark(), map.path, "a field name must be a string, got " + kind_of(key));
    const YamlItem key_item{key, key.Mark(), map.path};
    check_unique(seen, key.Scalar(), key_item, what);  // yaml-cpp keeps both of a duplicate pair
    const YAML::Node value = it->second;
    out.push_back(Entry{
        key.Scalar(), key_item,
        YamlItem{value, value.IsNull() ? key.Mark() : value.Mark(), join(map.path, key.Scalar())}});
  }
  return out;
}

std::vector<YamlItem> YamlReader::list(const YamlItem& item, bool empty_ok) const {
  std::vector<YamlItem> out;
  if (empty_ok && item.node.IsNull()) return out;
  if (!item.node.IsSequence()) fail(item, "expected a list, got " + kind_of(item.node));
  count_nodes(item, item.node.size());
  std::size_t i = 0;
  for (auto it = item.node.begin(); it != item.node.end(); ++it, ++i) {
    const YAML::Node element = *it;
    out.push_back(YamlItem{element, element.IsNull() ? item.mark : element.Mark(),
                           item.path + "[" + std::to_string(i) + "]"});
  }
  return out;
}

void YamlReader::count_nodes(const YamlItem& at, std::size_t n) const {
  nodes_ += n;
  if (max_nodes_ != 0 && nodes_ > max_nodes_) {
    fail(at, "more than " + std::to_string(max_nodes_) +
                 " YAML nodes for a file of this size: aliases (*name) expand to too many; "
                 "write them out");
  }
}

std::string YamlReader::scalar(const YamlItem& item) const {
  if (item.node.IsNull()) return {};
  if (!item.node.IsScalar()) fail(item, "expected a string, got " + kind_of(item.node));
  const std::string& s = item.node.Scalar();
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) fail(item, quoted_value(s) + " contains a control character");
    const std::size_t n = utf8_length(s, i);
    if (n == 0) fail(item, quoted_value(s) + " is not valid UTF-8");
    i += n;
  }
  return s;
}

std::string YamlReader::text(const YamlItem& item) const {
  if (!item.node.IsScalar()) fail(item, "expected a string, got " + kind_of(item.node));
  std::string s = scalar(item);
  if (s.empty()) fail(item, "must not be empty");
  return s;
}

std::uint64_t YamlReader::integer(const YamlItem& item, std::uint64_t lo, std::uint64_t hi) const {
  const std::string s = text(item);
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
    fail(item, quoted_value(s) + " is not a whole number " +
                   (hi == UINT64_MAX ? "of " + std::to_string(lo) + " or more"
                                     : "from " + std::to_string(lo) + " to " + std::to_string(hi)));
  }
  return v;
}

bool YamlReader::boolean(const YamlItem& item) const {
  const std::string s = text(item);
  bool v = false;
  if (!YAML::convert<bool>::decode(item.node, v))
    fail(item, quoted_value(s) + " is not true or false");
  return v;
}

void YamlReader::check_unique(Seen& seen, const std::string& value, const YamlItem& item,
                              std::string_view what) const {
  const auto [it, added] = seen.emplace(value, item.mark);
  if (!added) {
    fail(item, "duplicate " + std::string(what) + " " + quoted_value(value) + " (first at line " +
                   line_of(it->second) + ")");
  }
}

}  // namespace ratewin::server
