// The status page's parts that need no server: the Basic credentials a browser sends,
// and the page's embedding of its figures.
#include <doctest/doctest.h>

#include <string>

#include "admin/status_page.h"
#include "common/json.h"
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
  // Keys a client chose: one that would close the element, one that would open a comment
  // in which the element's own end tag no longer ends it (the page blanked), and '&',
  // '>', U+2028 and U+2029.
  // (The string literal's U+2028 and U+2029 are their UTF-8 bytes.)
  const std::string hostile = "</script><script>alert(1)</script> <!--<script> a&b>c \u2028\u2029";
  const std::string figures = R"({"top":{"key":")" + hostile + R"("}})";
  Response response;
  status_page(figures, response);
  CHECK(response.content_type == "text/html; charset=utf-8");
  const std::string& page = response.body;
  const std::string open = R"(<script type="application/json" id="initial">)";
  const std::size_t data = page.find(open);
  REQUIRE(data != std::string::npos);
  const std::size_t end = page.find("</script>", data);
  const std::string embedded = page.substr(data + open.size(), end - data - open.size());
  // Nothing in it that HTML reads: no '<', '>' or '&', no raw U+2028 or U+2029.
  CHECK(embedded.find_first_of("<>&") == std::string::npos);
  CHECK(embedded.find("\xE2\x80\xA8") == std::string::npos);
  CHECK(embedded.find("\xE2\x80\xA9") == std::string::npos);
  // And it is the same JSON: the key as the client sent it.
  const Result<JsonValue> parsed = JsonValue::parse(embedded);
  REQUIRE(parsed);
  const JsonValue* key = parsed->find("top")->find("key");
  REQUIRE(key != nullptr);
  CHECK(key->text() == hostile);
  CHECK(page.find("alert(1)</script>") == std::string::npos);
  bool csp = false;
  for (const auto& [name, value] : response.headers)
    if (name == "Content-Security-Policy") csp = value.starts_with("default-src 'none'");
  CHECK(csp);
}

}  // namespace
}  // namespace ratewin::server
