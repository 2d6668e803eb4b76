#include "common/log_event.h"

#include "common/json_writer.h"
#include "common/text.h"

namespace ratewin::server {

namespace {

bool needs_quotes(std::string_view s) noexcept {
  if (s.empty()) return true;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

}  // namespace

void write_event(JsonWriter& w, std::string_view event, std::span<const LogField> fields) {
  w.key("event").string(event);
  for (const LogField& f : fields) {
    w.key(f.name);
    if (const auto* text = std::get_if<std::string_view>(&f.value)) {
      w.string(*text);
    } else if (const auto* n = std::get_if<std::int64_t>(&f.value)) {
      w.number(*n);
    } else {
      w.number(std::get<double>(f.value));
    }
  }
}

std::string format_event(LogFormat format, std::string_view event, std::span<const LogField> fields) {
  std::string out;
  if (format == LogFormat::json) {
    JsonWriter w(out);
    write_event(w, event, fields);
    return out;
  }
  out.assign(event);
  out += ':';
  for (const LogField& f : fields) {
    out += ' ';
    out += f.name;
    out += '=';
    if (const auto* text = std::get_if<std::string_view>(&f.value)) {
      // JSON's escaping keeps a text value on one line.
      if (needs_quotes(*text)) {
        append_json_string(out, *text);
      } else {
        out += *text;
      }
    } else if (const auto* n = std::get_if<std::int64_t>(&f.value)) {
      out += std::to_string(*n);
    } else {
      append_double(out, std::get<double>(f.value));
    }
  }
  return out;
}

}  // namespace ratewin::server
