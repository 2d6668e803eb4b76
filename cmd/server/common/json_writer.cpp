#include "common/json_writer.h"

#include "common/text.h"

namespace ratewin::server {

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
  } else if (more_) {
    out_ += ',';
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_ += '{';
  more_ = false;
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  separate();
  out_ += '[';
  more_ = false;
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  separate();
  append_json_string(out_, name);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::string(std::string_view value) {
  separate();
  append_json_string(out_, value);
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::whole(std::int64_t value) {
  if (value >= 0) return whole(static_cast<std::uint64_t>(value));
  separate();
  out_ += '-';
  // The magnitude in unsigned arithmetic: -INT64_MIN does not fit an int64.
  append_number(out_, std::uint64_t{0} - static_cast<std::uint64_t>(value));
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::whole(std::uint64_t value) {
  separate();
  append_number(out_, value);
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::number(double value) {
  separate();
  append_double(out_, value);
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::boolean(bool value) {
  separate();
  out_ += value ? "true" : "false";
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::null() {
  separate();
  out_ += "null";
  more_ = true;
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  separate();
  out_ += json;
  more_ = true;
  return *this;
}

}  // namespace ratewin::server
