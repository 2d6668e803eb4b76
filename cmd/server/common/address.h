// IP addresses as the server compares them: parsed strictly, written in one canonical
// text form (so that "ip:" keys and the rules' lists match whatever form a proxy or a
// socket gives), and CIDR ranges (the trusted proxies).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/outcome.h"

namespace ratewin::server {

// An IPv4 or IPv6 address. An IPv4-mapped IPv6 address (::ffff:a.b.c.d, as a dual-stack
// socket reports an IPv4 peer) is the IPv4 address: they compare equal and print alike.
class IpAddress {
 public:
  IpAddress() = default;  // :: (the unspecified IPv6 address)

  // Strict: an IPv4 dotted quad (four decimal numbers 0-255, no leading zeros), or IPv6
  // text (RFC 4291 2.2, any case, "::" and a trailing dotted quad allowed). Refused: a
  // zone ID ("fe80::1%eth0": it names an interface of the machine that wrote it),
  // brackets, a port, whitespace, anything else.
  static std::optional<IpAddress> parse(std::string_view text) noexcept;
  // From the 4 bytes of an IPv4 address (network order).
  static IpAddress v4(const std::array<std::uint8_t, 4>& bytes) noexcept;

  bool is_v4() const noexcept;
  // IPv4 as ::ffff:a.b.c.d, IPv6 as is: 16 bytes in network order.
  const std::array<std::uint8_t, 16>& bytes() const noexcept { return bytes_; }
  // The first `bits` of the 128-bit form kept, the rest zero (for IPv4, bits counts
  // from the start of the mapped form: 96 + the IPv4 prefix).
  IpAddress masked(unsigned bits) const noexcept;

  // The canonical text: dotted quad for IPv4; RFC 5952 for IPv6 (lowercase hex without
  // leading zeros; the longest run of two or more zero groups, the first on a tie, as
  // "::"; an IPv4-compatible or other embedded address in hex like any other group).
  std::string to_string() const;
  void append_to(std::string& out) const;

  friend bool operator==(const IpAddress&, const IpAddress&) = default;

 private:
  std::array<std::uint8_t, 16> bytes_{};
};

// Hash of an address (for hash tables keyed on addresses).
struct IpAddressHash {
  std::size_t operator()(const IpAddress& a) const noexcept;
};

// The canonical text of an address written as text, nullopt if IpAddress::parse refuses it.
std::optional<std::string> canonical_address(std::string_view text);

// A range of addresses: an IPv4 range matches IPv4 addresses only, an IPv6 range IPv6
// addresses only (so ::/0 is every IPv6 address, and no IPv4 one).
class Cidr {
 public:
  // "a.b.c.d/n" (n 0-32) or "x:y::z/n" (n 0-128); a bare address is /32 or /128. An
  // IPv4-mapped range (::ffff:a.b.c.d/n, n >= 96) is the IPv4 range /n-96. The bits after
  // the prefix must be zero ("10.0.0.1/8" is refused: write 10.0.0.0/8). On failure an
  // `invalid` Status that says why.
  static Result<Cidr> parse(std::string_view text);

  bool contains(const IpAddress& address) const noexcept;
  // Canonical: "10.0.0.0/8", "2001:db8::/32".
  std::string to_string() const;

 private:
  IpAddress network_;
  unsigned bits_ = 0;  // of the 128-bit form (an IPv4 /n is 96 + n)
};

// A list of ranges, as --trust-proxy takes it.
class AddressRanges {
 public:
  AddressRanges() = default;  // empty: contains nothing
  // "CIDR[,CIDR...]", spaces around entries allowed. On failure an `invalid` Status that
  // names the entry and the problem.
  static Result<AddressRanges> parse(std::string_view list);

  bool contains(const IpAddress& address) const noexcept;
  bool empty() const noexcept { return ranges_.empty(); }
  // "10.0.0.0/8, ::1/128", canonical.
  std::string to_string() const;

 private:
  std::vector<Cidr> ranges_;
};

}  // namespace ratewin::server
