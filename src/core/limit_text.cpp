// Limits written as text ("10/second", "100 per 5 minutes", "10/second; 1000/day"): the
// one reader every front end uses (see parse_limits in ratewin/limit.h).
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ratewin/limit.h"

namespace ratewin {
inline namespace v1 {
namespace {

struct Unit {
  std::string_view name;
  std::int64_t seconds;
};
constexpr std::int64_t kDay = 86400;
constexpr std::array<Unit, 6> kUnits{{{"second", 1},
                                      {"minute", 60},
                                      {"hour", 3600},
                                      {"day", kDay},
                                      {"month", 30 * kDay},
                                      {"year", 365 * kDay}}};

constexpr std::string_view kSpaces = " \t\n\r\f\v";
constexpr std::string_view kSeparators = ";,|";

bool is_space(char c) noexcept { return kSpaces.find(c) != std::string_view::npos; }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_letter(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_word(char c) noexcept { return is_digit(c) || is_letter(c) || c == '_'; }
char lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// `text` between single quotes, as Python's repr writes a str without quotes in it: \\,
// \' and control characters escaped, other bytes (UTF-8 text) as they are.
std::string quoted(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The whole number written in `digits` (ASCII digits only), or false when it exceeds `most`.
bool number(std::string_view digits, std::uint64_t most, std::uint64_t& out) noexcept {
  out = 0;
  for (const char c : digits) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (out > (most - d) / 10) return false;
    out = out * 10 + d;
  }
  return true;
}

// One limit's parts, as the grammar reads them.
struct Parts {
  std::string_view count, amount, unit;
};

bool read_parts(std::string_view text, Parts& parts) noexcept {
  std::size_t i = 0;
  const std::size_t n = text.size();
  const auto skip_spaces = [&] {
    while (i < n && is_space(text[i])) ++i;
  };
  const auto take = [&](bool (*kind)(char) noexcept) {
    const std::size_t from = i;
    while (i < n && kind(text[i])) ++i;
    return text.substr(from, i - from);
  };
  skip_spaces();
  parts.count = take(is_digit);
  if (parts.count.empty()) return false;
  skip_spaces();
  if (i < n && text[i] == '/') {
    ++i;
  } else if (i + 3 <= n && lower(text[i]) == 'p' && lower(text[i + 1]) == 'e' &&
             lower(text[i + 2]) == 'r' && !is_word(text[i - 1]) &&
             (i + 3 == n || !is_word(text[i + 3]))) {
    i += 3;  // "per", a word of its own
  } else {
    return false;
  }
  skip_spaces();
  parts.amount = take(is_digit);
  skip_spaces();
  parts.unit = take(is_letter);
  if (parts.unit.empty()) return false;
  skip_spaces();
  return i == n;
}

const Unit* find_unit(std::string_view written) {
  std::string name;
  for (const char c : written) name += lower(c);
  const auto find = [&](std::string_view n) -> const Unit* {
    for (const Unit& u : kUnits) {
      if (u.name == n) return &u;
    }
    return nullptr;
  };
  const Unit* unit = find(name);
  if (unit == nullptr && !name.empty() && name.back() == 's') {
    name.pop_back();
    unit = find(name);
  }
  return unit;
}

}  // namespace

std::variant<LimitSpec, std::string> read_limit(std::string_view text, const LimitSpec& base) {
  Parts parts;
  if (!read_parts(text, parts)) {
    return "cannot read " + quoted(text) +
           " as a limit; write COUNT/UNIT or COUNT per [AMOUNT] UNIT, such as '10/second' or "
           "'100 per 5 minutes'";
  }
  const Unit* unit = find_unit(parts.unit);
  if (unit == nullptr) {
    return "unknown unit " + quoted(parts.unit) + " in " + quoted(text) +
           "; use second, minute, hour, day, month or year";
  }
  LimitSpec spec = base;
  if (!number(parts.count, Limit::kMaxCount, spec.max)) {
    return quoted(text) + ": the count must be from 1 to " + std::to_string(Limit::kMaxCount) +
           ", got " + std::string(parts.count);
  }
  if (spec.max == 0) return quoted(text) + " allows nothing; the count must be at least 1";
  std::uint64_t amount = 1;
  const auto longest = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(Limit::kMaxInterval).count());
  if (!parts.amount.empty() &&
      !number(parts.amount, longest / static_cast<std::uint64_t>(unit->seconds), amount)) {
    return quoted(text) + ": the window is longer than 366 days, the longest";
  }
  if (amount == 0) return quoted(text) + " has a window of 0; the amount must be at least 1";
  spec.interval = std::chrono::seconds(static_cast<std::int64_t>(amount) * unit->seconds);
  return spec;
}

std::variant<Limit, std::string> parse_limit(std::string_view text, const LimitSpec& base) {
  auto read = read_limit(text, base);
  if (std::string* error = std::get_if<std::string>(&read)) return std::move(*error);
  const LimitSpec& spec = std::get<LimitSpec>(read);
  auto made = Limit::from_spec(spec);
  if (const LimitIssue* issue = std::get_if<LimitIssue>(&made)) {
    // In the text's terms: its count and its window.
    LimitTerms terms;
    terms.max = "count";
    terms.interval = "window";
    return quoted(text) + ": " + describe(*issue, spec, terms);
  }
  return std::get<Limit>(made);
}

std::variant<std::vector<Limit>, std::string> parse_limits(std::string_view text,
                                                           const LimitSpec& base) {
  std::vector<std::string_view> parts;
  bool any = false;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find_first_of(kSeparators, start);
    const std::string_view part =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    any = any || part.find_first_not_of(kSpaces) != std::string_view::npos;
    parts.push_back(part);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (!any) return "no limit in " + quoted(text);
  std::vector<Limit> limits;
  limits.reserve(parts.size());
  for (const std::string_view part : parts) {
    if (part.find_first_not_of(kSpaces) == std::string_view::npos)
      return "an empty limit in " + quoted(text);
    auto one = parse_limit(part, base);
    if (std::string* error = std::get_if<std::string>(&one)) return std::move(*error);
    limits.push_back(std::get<Limit>(one));
  }
  return limits;
}

Limit Limit::parse(std::string_view text) {
  auto one = parse_limit(text);
  if (std::string* error = std::get_if<std::string>(&one))
    throw std::invalid_argument("ratewin::Limit::parse: " + *error);
  return std::get<Limit>(one);
}

std::vector<Limit> Limit::parse_many(std::string_view text) {
  auto many = parse_limits(text);
  if (std::string* error = std::get_if<std::string>(&many))
    throw std::invalid_argument("ratewin::Limit::parse_many: " + *error);
  return std::get<std::vector<Limit>>(std::move(many));
}

}  // namespace v1
}  // namespace ratewin
