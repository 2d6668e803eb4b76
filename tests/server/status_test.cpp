// The status page's parts that need no server: the Basic credentials a browser sends,
// and the page's embedding of its figures.
#include <doctest/doctest.h>

#include <string>

#include "admin/status_page.h"
#include "common/text.h"
#include "service/client.h"

namespace ratewin::server {
namespace {

Request with_authorization(std::string value) {
  Request r;
  r.headers.emplace_back("authorization", std::move(value));
  return r;
}

TEST_CASE("base64 as RFC 4648 writes it, and nothing else") {
  CHECK(base64_decode("") == std::string());
  CHECK(base64_decode("Zg==") == std::string("f"));
  CHECK(base64_decode("Zm8=") == std::string("fo"));
  CHECK(base64_decode("Zm9v") == std::string("foo"));
  CHECK(base64_decode("b3BzOnMzY3JldA==") == std::string("ops:s3cret"));
  CHECK(base64_decode("/+8A") == std::string("\xff\xef\x00", 3));
  CHECK_FALSE(base64_decode("Zm9"));     // not a multiple of 4
  CHECK_FALSE(base64_decode("Zm9v!A=="));
  CHECK_FALSE(base64_decode("Z==="));
  CHECK_FALSE(base64_decode("Zg==Zg=="));  // padding inside
  CHECK_FALSE(base64_decode("Zm 9"));
}

TEST_CASE("Basic credentials: the password, whatever the user; nothing for anything else") {
  CHECK(basic_password(with_authorization("Basic b3BzOnMzY3JldA==")) == std::string("s3cret"));
  CHECK(basic_password(with_authorization("basic  b3BzOnMzY3JldA== ")) == std::string("s3cret"));
  CHECK(basic_password(with_authorization("Basic OnMzY3JldA==")) == std::string("s3cret"));  // ":s3cret"
  CHECK(basic_password(with_authorization("Basic YTpiOmM=")) == std::string("b:c"));  // "a:b:c"
  CHECK_FALSE(basic_password(with_authorization("Basic bm9jb2xvbg==")));  // "nocolon"
  CHECK_FALSE(basic_password(with_authorization("Bearer s3cret")));
  CHECK_FALSE(basic_password(with_authorization("Basicb3BzOnMzY3JldA==")));
  CHECK_FALSE(basic_password(Request{}));
}

TEST_CASE("the status page embeds its figures so that none can close their element") {
  Response response;
  status_page(R"({"top":{"key":"</script><script>alert(1)</script>"}})", response);
  CHECK(response.content_type == "text/html; charset=utf-8");
  const std::string& page = response.body;
  // Exactly the page's own closing tags remain: the embedded JSON's are written <\/.
  const std::size_t data = page.find(R"(<script type="application/json" id="initial">)");
  REQUIRE(data != std::string::npos);
  const std::size_t end = page.find("</script>", data);
  CHECK(page.substr(data, end - data).find("<\\/script><script>alert(1)<\\/script>") != std::string::npos);
  CHECK(page.find("alert(1)</script>") == std::string::npos);
  bool csp = false;
  for (const auto& [name, value] : response.headers)
    if (name == "Content-Security-Policy") csp = value.starts_with("default-src 'none'");
  CHECK(csp);
}

}  // namespace
}  // namespace ratewin::server
