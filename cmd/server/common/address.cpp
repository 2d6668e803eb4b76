#include "common/address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

#include "common/text.h"

namespace ratewin::server {

namespace {

constexpr std::array<std::uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

}  // namespace

std::optional<IpAddress> IpAddress::parse(std::string_view text) noexcept {
  // The longest IPv6 text is 45 characters (8 groups with a dotted quad at the end).
  // inet_pton (glibc) is strict: no zone ID, no leading zeros in a dotted quad, no
  // shorthand IPv4 forms; only the characters of addresses are let through first.
  char copy[48];
  if (text.empty() || text.size() >= sizeof copy) return std::nullopt;
  const bool plausible = std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
           c == '.';
  });
  if (!plausible) return std::nullopt;
  text.copy(copy, text.size());
  copy[text.size()] = '\0';
  IpAddress out;
  if (text.find(':') == std::string_view::npos) {
    std::array<std::uint8_t, 4> v4{};
    if (inet_pton(AF_INET, copy, v4.data()) != 1) return std::nullopt;
    return IpAddress::v4(v4);
  }
  if (inet_pton(AF_INET6, copy, out.bytes_.data()) != 1) return std::nullopt;
  return out;
}

IpAddress IpAddress::v4(const std::array<std::uint8_t, 4>& bytes) noexcept {
  IpAddress out;
  std::copy(kMappedPrefix.begin(), kMappedPrefix.end(), out.bytes_.begin());
  std::copy(bytes.begin(), bytes.end(), out.bytes_.begin() + 12);
  return out;
}

bool IpAddress::is_v4() const noexcept {
  return std::equal(kMappedPrefix.begin(), kMappedPrefix.end(), bytes_.begin());
}

IpAddress IpAddress::masked(unsigned bits) const noexcept {
  IpAddress out = *this;
  for (unsigned i = 0; i < 16; ++i) {
    const unsigned kept = bits > 8 * i ? std::min(8U, bits - 8 * i) : 0U;
    out.bytes_[i] &= static_cast<std::uint8_t>(0xff00U >> kept);
  }
  return out;
}

void IpAddress::append_to(std::string& out) const {
  if (is_v4()) {
    for (std::size_t i = 12; i < 16; ++i) {
      if (i != 12) out += '.';
      append_number(out, bytes_[i]);
    }
    return;
  }
  std::array<unsigned, 8> groups{};
  for (std::size_t g = 0; g < 8; ++g)
    groups[g] = (static_cast<unsigned>(bytes_[2 * g]) << 8U) | bytes_[2 * g + 1];
  // The longest run of zero groups (the first of equals), if it is two or more long.
  std::size_t best = 8;
  std::size_t best_length = 1;
  for (std::size_t g = 0; g < 8;) {
    if (groups[g] != 0) {
      ++g;
      continue;
    }
    std::size_t end = g;
    while (end < 8 && groups[end] == 0) ++end;
    if (end - g > best_length) {
      best = g;
      best_length = end - g;
    }
    g = end;
  }
  for (std::size_t g = 0; g < 8; ++g) {
    if (g == best) {
      out += "::";
      g += best_length - 1;
      continue;
    }
    if (g != 0 && g != best + best_length) out += ':';
    char hex[8];
    const auto r = std::to_chars(hex, hex + sizeof hex, groups[g], 16);
    out.append(hex, r.ptr);
  }
}

std::string IpAddress::to_string() const {
  std::string out;
  append_to(out);
  return out;
}

std::size_t IpAddressHash::operator()(const IpAddress& a) const noexcept {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const std::uint8_t b : a.bytes()) h = (h ^ b) * 1099511628211ULL;
  return static_cast<std::size_t>(h);
}

std::optional<std::string> canonical_address(std::string_view text) {
  const std::optional<IpAddress> a = IpAddress::parse(text);
  if (!a) return std::nullopt;
  return a->to_string();
}

Result<Cidr> Cidr::parse(std::string_view text) {
  const std::size_t slash = text.find('/');
  const std::string_view address_text = text.substr(0, slash);
  if (address_text.find('%') != std::string_view::npos)
    return invalid("a zone ID (%...) has no place in a range");
  const std::optional<IpAddress> address = IpAddress::parse(address_text);
  if (!address) return invalid("not an IP address");
  // A mapped range written in IPv6 form: below /96 it would mix IPv4 and IPv6.
  const bool v4 = address->is_v4();
  const bool written_v4 = address_text.find(':') == std::string_view::npos;
  unsigned bits = 128;
  if (slash != std::string_view::npos) {
    const std::string_view digits = text.substr(slash + 1);
    unsigned n = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    const unsigned most = written_v4 ? 32 : 128;
    if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size() ||
        (digits.size() > 1 && digits.front() == '0') || n > most) {
      return invalid("the prefix length after '/' must be a whole number from 0 to " +
                     std::to_string(most));
    }
    bits = written_v4 ? 96 + n : n;
  }
  if (v4 && bits < 96)
    return invalid("an IPv4-mapped range must be /96 or longer (write it as an IPv4 range)");
  Cidr out;
  out.network_ = address->masked(bits);
  out.bits_ = bits;
  if (!(out.network_ == *address)) {
    return invalid("the address has bits set after the prefix (the range is " + out.to_string() +
                   ")");
  }
  return out;
}

bool Cidr::contains(const IpAddress& address) const noexcept {
  return address.is_v4() == network_.is_v4() && address.masked(bits_) == network_;
}

std::string Cidr::to_string() const {
  std::string out = network_.to_string();
  out += '/';
  append_number(out, network_.is_v4() ? bits_ - 96 : bits_);
  return out;
}

Result<AddressRanges> AddressRanges::parse(std::string_view list) {
  AddressRanges out;
  while (true) {
    const std::size_t comma = list.find(',');
    const std::string_view entry = trim_ows(list.substr(0, comma));
    const Result<Cidr> range = Cidr::parse(entry);
    if (!range) {
      // (Appended, not "\"" + std::string(entry): GCC 12 at -O3 warns of that falsely.)
      std::string quoted(1, '"');
      quoted.append(entry).push_back('"');
      return range.status().within(quoted);
    }
    out.ranges_.push_back(*range);
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

bool AddressRanges::contains(const IpAddress& address) const noexcept {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const Cidr& r) { return r.contains(address); });
}

std::string AddressRanges::to_string() const {
  std::string out;
  for (const Cidr& r : ranges_) {
    if (!out.empty()) out += ", ";
    out += r.to_string();
  }
  return out;
}

}  // namespace ratewin::server
