// IP addresses: strict parsing, one canonical text form, CIDR ranges and lists.
#include "common/address.h"

#include <doctest/doctest.h>

#include <string>

namespace ratewin::server {
namespace {

std::string canonical(std::string_view text) {
  const auto a = IpAddress::parse(text);
  REQUIRE_MESSAGE(a.has_value(), text);
  return a->to_string();
}

std::string cidr_error(std::string_view text) {
  const Result<Cidr> c = Cidr::parse(text);
  CHECK_MESSAGE(!c.ok(), text);
  CHECK_MESSAGE(c.status().code() == Status::Code::invalid, text);
  return c.message();
}

std::string cidr(std::string_view text) {
  const Result<Cidr> c = Cidr::parse(text);
  REQUIRE_MESSAGE(c.ok(), text, ": ", c.message());
  return c->to_string();
}

TEST_CASE("IPv4 addresses: strict dotted quads") {
  CHECK(canonical("1.2.3.4") == "1.2.3.4");
  CHECK(canonical("0.0.0.0") == "0.0.0.0");
  CHECK(canonical("255.255.255.255") == "255.255.255.255");
  for (const char* bad :
       {"", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.04", "0x1.2.3.4", "256.1.1.1", "1.2.3.4 ",
        " 1.2.3.4", "1.2.3.4:80", "1.2.3.-4", "1..2.3", "１.2.3.4", "1.2.3.4\n", "4294967295"}) {
    CHECK_MESSAGE(!IpAddress::parse(bad).has_value(), bad);
  }
}

TEST_CASE("IPv6 addresses have one text form (RFC 5952)") {
  CHECK(canonical("::1") == "::1");
  CHECK(canonical("0:0:0:0:0:0:0:1") == "::1");
  CHECK(canonical("::") == "::");
  CHECK(canonical("2001:DB8::A") == "2001:db8::a");
  CHECK(canonical("2001:0db8:0000:0000:0000:0000:0000:0001") == "2001:db8::1");
  // A single zero group is not compressed; the longest run is, the first of equals.
  CHECK(canonical("2001:db8:0:1:1:1:1:1") == "2001:db8:0:1:1:1:1:1");
  CHECK(canonical("2001:0:0:1:0:0:0:1") == "2001:0:0:1::1");
  CHECK(canonical("2001:db8:0:0:1:0:0:1") == "2001:db8::1:0:0:1");
  CHECK(canonical("1:0:0:0:0:0:0:0") == "1::");
  CHECK(canonical("fe80:0::0:1") == "fe80::1");
  // An embedded dotted quad outside the mapped range is written in hex.
  CHECK(canonical("::1.2.3.4") == "::102:304");
  CHECK(canonical("64:ff9b::192.0.2.33") == "64:ff9b::c000:221");
  for (const char* bad : {":", ":::", "1::2::3", "1:2:3:4:5:6:7:8:9", "12345::", "g::1", "[::1]",
                          "[::1]:80", "::1 ", "fe80::1%eth0", "fe80::1%1", "::1/128",
                          "1:2:3:4:5:6:7", "::ffff:01.2.3.4", "::ffff:1.2.3"}) {
    CHECK_MESSAGE(!IpAddress::parse(bad).has_value(), bad);
  }
}

TEST_CASE("an IPv4-mapped IPv6 address is the IPv4 address") {
  const auto mapped = IpAddress::parse("::ffff:127.0.0.1");
  const auto hex = IpAddress::parse("::FFFF:7f00:1");
  const auto plain = IpAddress::parse("127.0.0.1");
  REQUIRE(mapped);
  REQUIRE(hex);
  REQUIRE(plain);
  CHECK(mapped->is_v4());
  CHECK(*mapped == *plain);
  CHECK(*hex == *plain);
  CHECK(mapped->to_string() == "127.0.0.1");
  CHECK(IpAddressHash{}(*mapped) == IpAddressHash{}(*plain));
  CHECK(!IpAddress::parse("::1")->is_v4());
  CHECK(!IpAddress::parse("::127.0.0.1")->is_v4());  // IPv4-compatible: not the same
  CHECK(canonical_address("0:0:0:0:0:FFFF:0A00:0001") == "10.0.0.1");
  CHECK(!canonical_address("10.0.0.1%eth0"));
}

TEST_CASE("masking keeps a prefix") {
  CHECK(IpAddress::parse("2001:db8:1:2:3:4:5:6")->masked(64).to_string() == "2001:db8:1:2::");
  CHECK(IpAddress::parse("2001:db8::ffff")->masked(121).to_string() == "2001:db8::ff80");
  CHECK(IpAddress::parse("10.1.2.3")->masked(96 + 8).to_string() == "10.0.0.0");
  CHECK(IpAddress::parse("10.1.2.3")->masked(128) == *IpAddress::parse("10.1.2.3"));
}

TEST_CASE("CIDR ranges") {
  CHECK(cidr("10.0.0.0/8") == "10.0.0.0/8");
  CHECK(cidr("192.0.2.7") == "192.0.2.7/32");
  CHECK(cidr("0.0.0.0/0") == "0.0.0.0/0");
  CHECK(cidr("2001:DB8::/32") == "2001:db8::/32");
  CHECK(cidr("::1") == "::1/128");
  CHECK(cidr("::/0") == "::/0");
  CHECK(cidr("::ffff:10.0.0.0/104") == "10.0.0.0/8");
  CHECK(cidr("::ffff:10.0.0.1") == "10.0.0.1/32");

  const auto ten = Cidr::parse("10.0.0.0/8");
  REQUIRE(ten);
  CHECK(ten->contains(*IpAddress::parse("10.255.0.1")));
  CHECK(ten->contains(*IpAddress::parse("::ffff:10.1.1.1")));
  CHECK(!ten->contains(*IpAddress::parse("11.0.0.1")));
  CHECK(!ten->contains(*IpAddress::parse("::a00:1")));
  const auto all6 = Cidr::parse("::/0");
  REQUIRE(all6);
  CHECK(all6->contains(*IpAddress::parse("2001:db8::1")));
  CHECK(!all6->contains(*IpAddress::parse("10.0.0.1")));  // IPv6 ranges hold no IPv4
  const auto all4 = Cidr::parse("0.0.0.0/0");
  REQUIRE(all4);
  CHECK(all4->contains(*IpAddress::parse("::ffff:192.0.2.1")));
  CHECK(!all4->contains(*IpAddress::parse("::1")));
  const auto doc = Cidr::parse("2001:db8::/33");
  REQUIRE(doc);
  CHECK(doc->contains(*IpAddress::parse("2001:db8:7fff::1")));
  CHECK(!doc->contains(*IpAddress::parse("2001:db8:8000::1")));

  CHECK(cidr_error("10.0.0.1/8").find("10.0.0.0/8") != std::string::npos);
  CHECK(cidr_error("10.0.0.0/33").find("0 to 32") != std::string::npos);
  CHECK(cidr_error("::/129").find("0 to 128") != std::string::npos);
  for (const char* bad :
       {"", "/8", "10.0.0.0/", "10.0.0.0/08", "10.0.0.0/-1", "10.0.0.0/8 ", "10.0.0.0/8/8",
        "10.0.0.0/x", "example.com/8", "fe80::%eth0/64", "::ffff:0.0.0.0/95", "10.0.0/8"}) {
    cidr_error(bad);
  }
  CHECK(cidr_error("fe80::%eth0/64").find("zone") != std::string::npos);
}

TEST_CASE("lists of ranges") {
  const auto list = AddressRanges::parse("10.0.0.0/8, 192.0.2.1 ,::1");
  REQUIRE_MESSAGE(list, list.message());
  CHECK(list->to_string() == "10.0.0.0/8, 192.0.2.1/32, ::1/128");
  CHECK(list->contains(*IpAddress::parse("10.9.9.9")));
  CHECK(list->contains(*IpAddress::parse("::ffff:192.0.2.1")));
  CHECK(list->contains(*IpAddress::parse("::1")));
  CHECK(!list->contains(*IpAddress::parse("192.0.2.2")));
  CHECK(!AddressRanges().contains(*IpAddress::parse("10.0.0.1")));

  const auto trailing = AddressRanges::parse("10.0.0.0/8,");
  CHECK(!trailing);
  CHECK(trailing.message().find("\"\"") != std::string::npos);
  const auto bogus = AddressRanges::parse("10.0.0.0/8,bogus");
  CHECK(!bogus);
  CHECK(bogus.status().code() == Status::Code::invalid);
  CHECK(bogus.message() == "\"bogus\": not an IP address");
  CHECK(!AddressRanges::parse(""));
}

}  // namespace
}  // namespace ratewin::server
