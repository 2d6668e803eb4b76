// JSON written into a caller's string: objects and arrays whose commas the writer puts,
// member names and strings escaped by append_json_string (text.h, the one escaper),
// numbers as the server has always written them. It checks nothing about the shape: a
// key outside any object is written as asked, so a list of members without braces (the
// members a log line adds after its own, log_event.h) is written the same way.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

namespace ratewin::server {

class JsonWriter {
 public:
  // Appends to `out` (what it holds already stays), which must outlive the writer.
  explicit JsonWriter(std::string& out) noexcept : out_(out) {}
  // Goes on inside an object or array whose first members or elements `out` holds
  // already (a head written once and kept for reuse, then a value appended by hand): the
  // next key or value is preceded by a comma.
  struct Continuing {};
  JsonWriter(std::string& out, Continuing) noexcept : out_(out), more_(true) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // A member's name: the next value written is its value.
  JsonWriter& key(std::string_view name);
  // Bytes that are not UTF-8 become U+FFFD (append_json_string).
  JsonWriter& string(std::string_view value);
  // A whole number in decimal, of any integer type but bool.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonWriter& number(T value) {
    if constexpr (std::signed_integral<T>) {
      return whole(static_cast<std::int64_t>(value));
    } else {
      return whole(static_cast<std::uint64_t>(value));
    }
  }
  // The shortest decimal form that reads back as the same double (append_double: 2.5,
  // 3, 1e-05, 1e+21).
  JsonWriter& number(double value);
  JsonWriter& boolean(bool value);
  JsonWriter& null();
  // A value that is JSON already (another part's document), as it is.
  JsonWriter& raw(std::string_view json);

 private:
  // The comma before a key or a value, unless it is the first of its object or array or
  // the value of the key just written.
  void separate();
  JsonWriter& whole(std::int64_t value);
  JsonWriter& whole(std::uint64_t value);

  std::string& out_;
  bool more_ = false;       // something was written in the current object or array
  bool after_key_ = false;  // a key was just written
};

}  // namespace ratewin::server
