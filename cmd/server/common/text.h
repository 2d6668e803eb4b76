// The text the server writes (JSON, numbers) and reads (case-insensitive tokens), in one
// place for the HTTP layer, the service, the overrides and the rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ratewin_internal/utf8.h"

namespace ratewin::server {

// Length of the well-formed UTF-8 sequence starting at s[i], 0 if there is none.
using internal::utf8_length;
// Appends s as a quoted JSON string. Bytes that are not UTF-8 become U+FFFD, so the
// output is valid JSON whatever s holds (keys and paths come from clients).
void append_json_string(std::string& out, std::string_view s);
void append_number(std::string& out, std::uint64_t value);
// x rounded to the thousandth (figures shown in seconds or milliseconds, to the
// millisecond or microsecond).
double thousandths(double x) noexcept;
// The shortest decimal form that reads back as the same double.
void append_double(std::string& out, double value);
// ASCII letters compared without case (for HTTP tokens such as "Bearer").
bool iequals(std::string_view a, std::string_view b) noexcept;
// The value of a hex digit (either case), -1 for any other byte.
int hex_digit(char c) noexcept;
// The bytes standard base64 (RFC 4648, with padding) encodes; nullopt if `s` is not
// that.
std::optional<std::string> base64_decode(std::string_view s);
// A character of an HTTP token (RFC 9110 5.6.2): method, header and cookie names.
bool token_char(char c) noexcept;
// s without the spaces and tabs around it (HTTP's optional whitespace, RFC 9110 5.6.3).
std::string_view trim_ows(std::string_view s) noexcept;

}  // namespace ratewin::server
