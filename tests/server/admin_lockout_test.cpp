// The admin lockout: exact per address over a sliding minute, its own bounded table that
// evicts nobody, IPv6 by /64.
#include "admin/admin_lockout.h"

#include <doctest/doctest.h>

#include <string>

namespace ratewin::server {
namespace {

IpAddress ip(std::string_view text) {
  const auto a = IpAddress::parse(text);
  REQUIRE(a);
  return *a;
}

constexpr std::int64_t kMinute = AdminLockout::kWindow.count();

// `n` wrong tokens from `address` at `now`; how many were let try.
std::size_t wrong(AdminLockout& lockout, const IpAddress& address, std::int64_t now,
                  std::size_t n) {
  std::size_t tried = 0;
  for (std::size_t i = 0; i < n; ++i) tried += lockout.attempt(address, now).allowed ? 1 : 0;
  return tried;
}

TEST_CASE("admin lockout: ten wrong tokens in a sliding minute, then refused") {
  AdminLockout lockout;
  const IpAddress a = ip("192.0.2.1");
  for (std::int64_t i = 0; i < 10; ++i) CHECK(lockout.attempt(a, 1000 + i * 1000).allowed);
  AdminLockout::Verdict v = lockout.attempt(a, 10'500);
  CHECK(!v.allowed);
  CHECK(!v.table_full);
  CHECK(v.retry_after.count() == 1000 + kMinute - 10'500);
  // Even the right token is not looked at while locked out.
  CHECK(!lockout.attempt(a, 30'000).allowed);
  // The oldest failure leaves the window: one more try, then locked again.
  CHECK(lockout.attempt(a, 1000 + kMinute).allowed);
  CHECK(!lockout.attempt(a, 1000 + kMinute + 1).allowed);
  CHECK(lockout.attempt(a, 2000 + kMinute).allowed);
  // Others are not affected.
  CHECK(lockout.attempt(ip("192.0.2.2"), 30'000).allowed);
}

TEST_CASE("admin lockout: a right token is not counted") {
  AdminLockout lockout;
  const IpAddress a = ip("192.0.2.1");
  for (int i = 0; i < 100; ++i) {
    REQUIRE(lockout.attempt(a, 5).allowed);
    lockout.succeeded(a);
  }
  CHECK(lockout.size() == 0);
  CHECK(wrong(lockout, a, 5, 9) == 9);
  REQUIRE(lockout.attempt(a, 6).allowed);
  lockout.succeeded(a);  // the 10th try was right: 9 wrong ones so far
  CHECK(lockout.size() == 1);
  CHECK(wrong(lockout, a, 7, 5) == 1);
}

TEST_CASE("admin lockout: IPv4-mapped is IPv4, IPv6 is counted by /64") {
  AdminLockout lockout;
  CHECK(wrong(lockout, ip("::ffff:192.0.2.1"), 0, 10) == 10);
  CHECK(!lockout.attempt(ip("192.0.2.1"), 1).allowed);
  CHECK(lockout.attempt(ip("192.0.2.2"), 1).allowed);
  for (int i = 0; i < 10; ++i)
    CHECK(lockout.attempt(ip("2001:db8:0:1::" + std::to_string(i + 1)), 1).allowed);
  CHECK(!lockout.attempt(ip("2001:db8:0:1:ffff:ffff:ffff:ffff"), 2).allowed);
  CHECK(lockout.attempt(ip("2001:db8:0:2::1"), 2).allowed);
}

TEST_CASE("admin lockout: a full table lets new addresses try uncounted, and evicts nobody") {
  AdminLockout lockout(4);
  for (int i = 0; i < 4; ++i) CHECK(lockout.attempt(ip("10.0.0." + std::to_string(i)), i).allowed);
  CHECK(wrong(lockout, ip("10.0.0.0"), 10, 9) == 9);  // 10.0.0.0 locked out
  CHECK(lockout.size() == 4);
  // A flood of new addresses: each may try (a right token works), none counted, nobody's
  // lockout lost.
  for (int i = 0; i < 1000; ++i) {
    const AdminLockout::Verdict v =
        lockout.attempt(ip("10.1." + std::to_string(i / 200) + "." + std::to_string(i % 200)), 20);
    CHECK(v.allowed);
    CHECK(v.table_full);
    CHECK(v.retry_after.count() == 1 + kMinute - 20);  // when 10.0.0.1's failure expires
  }
  CHECK(lockout.size() == 4);
  CHECK(!lockout.attempt(ip("10.0.0.0"), 30).allowed);
  // Those in the table go on as before.
  CHECK(lockout.attempt(ip("10.0.0.1"), 30).allowed);
  // 10.0.0.0's lockout lasts until its oldest failure is a minute old.
  CHECK(!lockout.attempt(ip("10.0.0.0"), kMinute - 1).allowed);
  // Once the oldest entries expire, their slots are free again.
  CHECK(!lockout.attempt(ip("10.2.0.1"), 2 + kMinute).table_full);
  CHECK(!lockout.attempt(ip("10.2.0.2"), 3 + kMinute).table_full);
  CHECK(lockout.attempt(ip("10.2.0.3"), 3 + kMinute).table_full);  // the others are live
}

TEST_CASE("admin lockout: expired entries are dropped") {
  AdminLockout lockout(100);
  for (int i = 0; i < 100; ++i) lockout.attempt(ip("10.0.1." + std::to_string(i)), i);
  CHECK(lockout.size() == 100);
  lockout.attempt(ip("10.0.2.1"), 1000 + kMinute);
  CHECK(lockout.size() == 1);
}

}  // namespace
}  // namespace ratewin::server
