// libFuzzer target for the admin API's strict JSON parser: any bytes either parse or are
// refused with a message; a parsed value, written out again, parses to the same value
// (the parser read exactly what the text says). Nothing may crash, leak or recurse
// without bound.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/text.h"

namespace {

using ratewin::server::JsonValue;
using ratewin::server::Result;
using ratewin::server::Status;

// Canonical JSON text of a parsed value (numbers as they were written).
void write(const JsonValue& v, std::string& out) {
  using Type = JsonValue::Type;
  switch (v.type()) {
    case Type::null:
      out += "null";
      return;
    case Type::boolean:
      out += v.boolean() ? "true" : "false";
      return;
    case Type::number:
      out += v.text();
      return;
    case Type::string:
      ratewin::server::append_json_string(out, v.text());
      return;
    case Type::array:
      out += '[';
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        if (i != 0) out += ',';
        write(v.items()[i], out);
      }
      out += ']';
      return;
    case Type::object:
      out += '{';
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        if (i != 0) out += ',';
        ratewin::server::append_json_string(out, v.keys()[i]);
        out += ':';
        write(v.items()[i], out);
      }
      out += '}';
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Result<JsonValue> value = JsonValue::parse(text);
  if (!value) {
    // A refusal always says why, as bad input.
    if (value.message().empty() || value.status().code() != Status::Code::invalid) std::abort();
    return 0;
  }
  if (!value.message().empty()) std::abort();
  if (value->is(JsonValue::Type::object) && value->keys().size() != value->items().size())
    std::abort();
  std::string once;
  write(*value, once);
  const Result<JsonValue> again = JsonValue::parse(once);
  if (!again) std::abort();
  std::string twice;
  write(*again, twice);
  if (once != twice) std::abort();
  return 0;
}
