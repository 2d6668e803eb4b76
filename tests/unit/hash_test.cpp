#include "ratewin/hash.h"

#include <doctest/doctest.h>

#include <string>

namespace ratewin::test {

TEST_CASE("hash is XXH3-64 with seed 0, stable across processes and languages") {
  // Reference values from the xxHash specification's test vectors.
  CHECK(hash("") == 0x2D06800538D394C2ULL);
  CHECK(hash("a") != hash("b"));
  const std::string name = "tenant-42:/v1/orders";
  CHECK(hash(name) == hash(std::string_view(name)));
  CHECK(hash(name) == hash(name.c_str()));
}

}  // namespace ratewin::test
