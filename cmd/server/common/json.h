// A strict JSON parser (RFC 8259) for the admin API's request bodies: exactly the
// grammar, nothing more. No comments, single quotes, unquoted keys, trailing commas,
// hexadecimal or octal numbers, leading '+' or zeros, NaN or Infinity; no duplicate keys
// in an object; strings are UTF-8 (a \u escape of a lone surrogate is refused); nothing
// but whitespace after the value; nesting bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/outcome.h"

namespace ratewin::server {

class JsonValue {
 public:
  enum class Type { null, boolean, number, string, array, object };

  Type type() const noexcept { return type_; }
  bool is(Type t) const noexcept { return type_ == t; }

  bool boolean() const noexcept { return boolean_; }
  // A string's value (decoded, UTF-8), or a number as it was written.
  const std::string& text() const noexcept { return text_; }
  // A number's value (finite: numbers beyond the range of a double are refused).
  double number() const noexcept { return number_; }
  // A number written as a whole number (no fraction, no exponent) that fits: its value.
  std::optional<std::uint64_t> whole_number() const noexcept;
  // An array's elements, an object's values.
  const std::vector<JsonValue>& items() const noexcept { return items_; }
  // An object's keys, in the order written (items() holds the values in the same order).
  const std::vector<std::string>& keys() const noexcept { return keys_; }
  // An object's value for `key`, null if it has none.
  const JsonValue* find(std::string_view key) const noexcept;

  static constexpr std::size_t kMaxDepth = 32;
  // The value `text` holds; if it is not exactly one JSON value (with whitespace around
  // it), an `invalid` Status that says what is wrong and at which byte.
  static Result<JsonValue> parse(std::string_view text);

 private:
  friend class JsonParser;
  Type type_ = Type::null;
  bool boolean_ = false;
  double number_ = 0;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<std::string> keys_;
};

}  // namespace ratewin::server
