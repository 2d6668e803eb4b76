#include "common/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

#include "common/text.h"

namespace ratewin::server {

const JsonValue* JsonValue::find(std::string_view key) const noexcept {
  for (std::size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

std::optional<std::uint64_t> JsonValue::whole_number() const noexcept {
  if (type_ != Type::number || text_.find_first_of(".eE-") != std::string::npos) return {};
  std::uint64_t n = 0;
  const auto r = std::from_chars(text_.data(), text_.data() + text_.size(), n);
  if (r.ec != std::errc() || r.ptr != text_.data() + text_.size()) return {};
  return n;
}

// Recursive descent over the text, one byte of lookahead; the depth bounds the recursion.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Result<JsonValue> run() {
    JsonValue out;
    skip_space();
    if (value(out, 0)) {
      skip_space();
      if (at_ == text_.size()) return out;
      problem_ = "unexpected content after the value";
    }
    return invalid("at byte " + std::to_string(at_) + ": " + problem_);
  }

 private:
  static std::string quoted(std::string_view key) {
    std::string out;
    append_json_string(out, key);
    return out;
  }

  bool fail(std::string problem) {
    problem_ = std::move(problem);
    return false;
  }
  bool done() const { return at_ == text_.size(); }
  char peek() const { return text_[at_]; }

  void skip_space() {
    while (!done() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++at_;
  }

  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return fail("not a JSON value");
    at_ += word.size();
    return true;
  }

  bool value(JsonValue& out, std::size_t depth) {
    if (done()) return fail("a value was expected, the text ended");
    switch (peek()) {
      case '{':
        return object(out, depth + 1);
      case '[':
        return array(out, depth + 1);
      case '"':
        out.type_ = JsonValue::Type::string;
        return string(out.text_);
      case 't':
        out.type_ = JsonValue::Type::boolean;
        out.boolean_ = true;
        return literal("true");
      case 'f':
        out.type_ = JsonValue::Type::boolean;
        return literal("false");
      case 'n':
        out.type_ = JsonValue::Type::null;
        return literal("null");
      default:
        return number(out);
    }
  }

  bool enter(std::size_t depth) {
    if (depth > JsonValue::kMaxDepth)
      return fail("nested deeper than " + std::to_string(JsonValue::kMaxDepth) + " levels");
    ++at_;
    skip_space();
    return true;
  }

  bool object(JsonValue& out, std::size_t depth) {
    out.type_ = JsonValue::Type::object;
    if (!enter(depth)) return false;
    if (!done() && peek() == '}') {
      ++at_;
      return true;
    }
    while (true) {
      if (done() || peek() != '"') return fail("a key (a string in double quotes) was expected");
      const std::size_t key_at = at_;
      std::string key;
      if (!string(key)) return false;
      out.keys_.push_back(std::move(key));
      skip_space();
      if (done() || peek() != ':') return fail("':' was expected after the key");
      ++at_;
      skip_space();
      out.items_.emplace_back();
      if (!value(out.items_.back(), depth)) return false;
      if (repeats_last_key(out.keys_)) {
        at_ = key_at;
        return fail("duplicate key " + quoted(out.keys_.back()));
      }
      skip_space();
      if (done()) return fail("the object is not closed");
      if (peek() == '}') {
        if (const std::string* repeated = any_repeated_key(out.keys_))
          return fail("duplicate key " + quoted(*repeated));
        ++at_;
        return true;
      }
      if (peek() != ',') return fail("',' or '}' was expected");
      ++at_;
      skip_space();
    }
  }

  // Objects here are small, but a hostile body may hold thousands of keys: each key is
  // looked for among the earlier ones up to kLinear keys, and a larger object is checked
  // once more, sorted, when it closes.
  static constexpr std::size_t kLinear = 32;
  static bool repeats_last_key(const std::vector<std::string>& keys) {
    return keys.size() <= kLinear &&
           std::find(keys.begin(), keys.end() - 1, keys.back()) != keys.end() - 1;
  }
  static const std::string* any_repeated_key(const std::vector<std::string>& keys) {
    if (keys.size() <= kLinear) return nullptr;
    std::vector<const std::string*> sorted;
    sorted.reserve(keys.size());
    for (const std::string& k : keys) sorted.push_back(&k);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return *a < *b; });
    const auto it =
        std::adjacent_find(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return *a == *b; });
    return it == sorted.end() ? nullptr : *it;
  }

  bool array(JsonValue& out, std::size_t depth) {
    out.type_ = JsonValue::Type::array;
    if (!enter(depth)) return false;
    if (!done() && peek() == ']') {
      ++at_;
      return true;
    }
    while (true) {
      out.items_.emplace_back();
      if (!value(out.items_.back(), depth)) return false;
      skip_space();
      if (done()) return fail("the array is not closed");
      if (peek() == ']') {
        ++at_;
        return true;
      }
      if (peek() != ',') return fail("',' or ']' was expected");
      ++at_;
      skip_space();
    }
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // The 4 hex digits after "\u".
  bool code_unit(unsigned& out) {
    if (text_.size() - at_ < 6 || text_[at_] != '\\' || text_[at_ + 1] != 'u')
      return fail("\\u and 4 hex digits were expected");
    out = 0;
    for (std::size_t i = at_ + 2; i < at_ + 6; ++i) {
      const int d = hex_digit(text_[i]);
      if (d < 0) return fail("\\u must be followed by 4 hex digits");
      out = out * 16 + static_cast<unsigned>(d);
    }
    at_ += 6;
    return true;
  }

  static void append_utf8(std::string& out, unsigned c) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }

  bool escape(std::string& out) {
    if (at_ + 1 >= text_.size()) return fail("the string is not closed");
    const char c = text_[at_ + 1];
    const std::string_view simple = "\"\\/bfnrt";
    const std::string_view meaning = "\"\\/\b\f\n\r\t";
    if (const std::size_t k = simple.find(c); k != std::string_view::npos) {
      out += meaning[k];
      at_ += 2;
      return true;
    }
    if (c != 'u') return fail(std::string("unknown escape \\") + c);
    unsigned unit = 0;
    if (!code_unit(unit)) return false;
    if (unit >= 0xdc00 && unit <= 0xdfff) return fail("a lone low surrogate (\\udc00-\\udfff)");
    if (unit >= 0xd800 && unit <= 0xdbff) {
      unsigned low = 0;
      if (!code_unit(low) || low < 0xdc00 || low > 0xdfff)
        return fail("a high surrogate (\\ud800-\\udbff) must be followed by a low one");
      unit = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
    }
    append_utf8(out, unit);
    return true;
  }

  bool string(std::string& out) {
    ++at_;  // the opening quote
    while (true) {
      if (done()) return fail("the string is not closed");
      const auto c = static_cast<unsigned char>(peek());
      if (c == '"') {
        ++at_;
        return true;
      }
      if (c == '\\') {
        if (!escape(out)) return false;
        continue;
      }
      if (c < 0x20) return fail("a control character in a string (escape it)");
      const std::size_t n = utf8_length(text_, at_);
      if (n == 0) return fail("a string that is not UTF-8");
      out.append(text_.substr(at_, n));
      at_ += n;
    }
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number(JsonValue& out) {
    const std::size_t start = at_;
    const auto digits = [&] {
      const std::size_t from = at_;
      while (!done() && peek() >= '0' && peek() <= '9') ++at_;
      return at_ - from;
    };
    if (!done() && peek() == '-') ++at_;
    if (done() || peek() < '0' || peek() > '9') return fail("not a JSON value");
    if (peek() == '0') {
      ++at_;
      if (!done() && peek() >= '0' && peek() <= '9')
        return fail("a number must not start with 0 (no octal; write 8, not 010)");
    } else {
      digits();
    }
    if (!done() && peek() == '.') {
      ++at_;
      if (digits() == 0) return fail("a digit was expected after '.'");
    }
    if (!done() && (peek() == 'e' || peek() == 'E')) {
      ++at_;
      if (!done() && (peek() == '+' || peek() == '-')) ++at_;
      if (digits() == 0) return fail("a digit was expected in the exponent");
    }
    out.type_ = JsonValue::Type::number;
    out.text_.assign(text_.substr(start, at_ - start));
    const auto r =
        std::from_chars(out.text_.data(), out.text_.data() + out.text_.size(), out.number_);
    if (r.ec != std::errc() || !std::isfinite(out.number_)) {
      at_ = start;
      return fail("the number is out of range");
    }
    return true;
  }

  std::string_view text_;
  std::size_t at_ = 0;
  std::string problem_;
};

Result<JsonValue> JsonValue::parse(std::string_view text) { return JsonParser(text).run(); }

}  // namespace ratewin::server
