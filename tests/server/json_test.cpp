// The strict JSON parser: RFC 8259's grammar exactly, duplicate keys refused, depth bounded.
#include "common/json.h"

#include <doctest/doctest.h>

#include <string>

namespace ratewin::server {
namespace {

using Type = JsonValue::Type;

JsonValue parsed(std::string_view text) {
  Result<JsonValue> v = JsonValue::parse(text);
  REQUIRE_MESSAGE(v.ok(), text, " -> ", v.message());
  CHECK(v.message().empty());
  return *std::move(v);
}

std::string refused(std::string_view text) {
  const Result<JsonValue> v = JsonValue::parse(text);
  CHECK_MESSAGE(!v.ok(), text);
  CHECK_MESSAGE(v.status().code() == Status::Code::invalid, text);
  CHECK_MESSAGE(!v.message().empty(), text);
  return v.message();
}

TEST_CASE("JSON: values") {
  CHECK(parsed("null").is(Type::null));
  CHECK(parsed("true").boolean());
  CHECK(!parsed(" false ").boolean());
  CHECK(parsed("\t\r\n0\n").number() == 0.0);
  CHECK(parsed("-0").number() == 0.0);
  CHECK(parsed("12.5e2").number() == 1250.0);
  CHECK(parsed("1E+2").number() == 100.0);
  CHECK(parsed("-1.5e-3").number() == -0.0015);
  CHECK(parsed("17").text() == "17");
  CHECK(parsed("\"x\"").text() == "x");
  const JsonValue a = parsed("[1, [], {}, \"s\", null]");
  REQUIRE(a.is(Type::array));
  REQUIRE(a.items().size() == 5);
  CHECK(a.items()[1].is(Type::array));
  CHECK(a.items()[2].is(Type::object));
  const JsonValue o = parsed("{\"key\": \"k\", \"limit\": 5, \"nested\": {\"a\": [true]}}");
  REQUIRE(o.is(Type::object));
  CHECK(o.keys() == std::vector<std::string>{"key", "limit", "nested"});
  CHECK(o.find("key")->text() == "k");
  CHECK(o.find("limit")->whole_number() == 5U);
  CHECK(o.find("nested")->find("a")->items()[0].boolean());
  CHECK(o.find("missing") == nullptr);
}

TEST_CASE("JSON: whole numbers") {
  CHECK(parsed("0").whole_number() == 0U);
  CHECK(parsed("4294967295").whole_number() == 4294967295U);
  CHECK(parsed("18446744073709551615").whole_number() == UINT64_MAX);
  CHECK(!parsed("18446744073709551616").whole_number());
  CHECK(!parsed("5.0").whole_number());
  CHECK(!parsed("5e0").whole_number());
  CHECK(!parsed("-5").whole_number());
  CHECK(!parsed("\"5\"").whole_number());
}

TEST_CASE("JSON: strings and escapes") {
  CHECK(parsed(R"("a\"b\\c\/d\b\f\n\r\t")").text() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(parsed(R"("\u0041\u00e9\u20AC")").text() == "A\xc3\xa9\xe2\x82\xac");
  CHECK(parsed(R"("\ud83d\ude00")").text() == "\xf0\x9f\x98\x80");  // a surrogate pair
  CHECK(parsed(R"("\u0000")").text() == std::string(1, '\0'));
  CHECK(parsed("\"\xc3\xa9\xf0\x9f\x98\x80\"").text() == "\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(refused(R"("\ud83d")").find("high surrogate") != std::string::npos);
  CHECK(refused(R"("\ud83dx")").find("high surrogate") != std::string::npos);
  CHECK(refused(R"("\ud83d\u0041")").find("high surrogate") != std::string::npos);
  CHECK(refused(R"("\ude00")").find("lone low surrogate") != std::string::npos);
  CHECK(refused(R"("\x41")").find("unknown escape") != std::string::npos);
  CHECK(refused(R"("\u12")").find("4 hex digits") != std::string::npos);
  CHECK(refused(R"("\u12g4")").find("4 hex digits") != std::string::npos);
  CHECK(refused("\"a\nb\"").find("control character") != std::string::npos);
  CHECK(refused("\"a\tb\"").find("control character") != std::string::npos);
  CHECK(refused("\"\xff\"").find("not UTF-8") != std::string::npos);
  CHECK(refused("\"\xc0\xaf\"").find("not UTF-8") != std::string::npos);      // overlong
  CHECK(refused("\"\xed\xa0\x80\"").find("not UTF-8") != std::string::npos);  // surrogate
  CHECK(refused("\"abc").find("not closed") != std::string::npos);
  CHECK(refused("\"abc\\").find("not closed") != std::string::npos);
  CHECK(refused("'single'") == "at byte 0: not a JSON value");
}

TEST_CASE("JSON: numbers are RFC 8259's only") {
  for (const char* bad :
       {"010", "00",       "-01",       "0x10",  "0X1F",   "+1",    ".5",   "5.",
        "1e",  "1e+",      "1.e3",      "--1",   "-",      "0b101", "0o17", "1_000",
        "NaN", "Infinity", "-Infinity", "1e400", "-1e400", ".inf",  "1,5"}) {
    refused(bad);
  }
  CHECK(refused("010").find("must not start with 0") != std::string::npos);
  CHECK(refused("1e400").find("out of range") != std::string::npos);
  CHECK(refused("{\"limit\": 0x10}") == "at byte 11: ',' or '}' was expected");
}

TEST_CASE("JSON: what YAML would take is refused") {
  for (const char* bad : {
           "{key: x}",      // unquoted key
           "{\"key\": x}",  // unquoted string
           "{'key': 'x'}",  // single quotes
           "{\"a\": 1,}",   // trailing comma
           "[1, 2,]",
           "{\"a\": 1} # comment",  // comments
           "{\"a\": 1} // comment",
           "/* c */ {\"a\": 1}",
           "{\"a\": &x 1, \"b\": *x}",  // anchors and aliases
           "--- {\"a\": 1}",            // a document marker
           "key: x",                    // a block mapping
           "- 1",
           "{\"a\": yes}",
           "{\"a\": ~}",
           "{\"a\": True}",
           "{\"a\": NULL}",
           "{\"a\" 1}",
           "{\"a\": 1 \"b\": 2}",
           "{,}",
           "[,1]",
           "{\"a\": [1}",
           "{\"a\": 1]",
           "",
           "   ",
           "\xef\xbb\xbf{}",  // a byte order mark
           "{\"a\": 1} x",    // trailing garbage
           "{\"a\": 1}{\"b\": 2}",
           "1 2",
           "nul",
           "truex",
       }) {
    refused(bad);
  }
  CHECK(refused("{\"a\": 1} x") == "at byte 9: unexpected content after the value");
  CHECK(refused(std::string_view("{\"a\": 1}\0", 9)) ==
        "at byte 8: unexpected content after the value");
}

TEST_CASE("JSON: duplicate keys are refused, as decoded and in large objects") {
  CHECK(refused(R"({"a": 1, "a": 2})") == "at byte 9: duplicate key \"a\"");
  CHECK(refused(R"({"a": 1, "\u0061": 2})").find("duplicate key \"a\"") != std::string::npos);
  CHECK(refused(R"({"o": {"x": 1, "y": 2, "x": 3}})").find("duplicate key \"x\"") !=
        std::string::npos);
  parsed(R"({"a": {"a": 1}, "b": {"a": 2}})");  // the same key in different objects
  for (const std::size_t n : {33U, 40U, 64U, 100U, 1000U}) {
    std::string object = "{";
    for (std::size_t i = 0; i < n; ++i) object += "\"k" + std::to_string(i) + "\":0,";
    CHECK(parsed(object.substr(0, object.size() - 1) + "}").keys().size() == n);
    for (const std::size_t repeat : {0U, 31U, 32U, static_cast<unsigned>(n) - 1}) {
      CAPTURE(n);
      CAPTURE(repeat);
      CHECK(refused(object + "\"k" + std::to_string(repeat) + "\":1}").find("duplicate key") !=
            std::string::npos);
    }
  }
}

TEST_CASE("JSON: nesting is bounded") {
  const auto nested = [](std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  parsed(nested(JsonValue::kMaxDepth));
  CHECK(refused(nested(JsonValue::kMaxDepth + 1)).find("nested deeper") != std::string::npos);
  CHECK(refused(std::string(100000, '[')).find("nested deeper") != std::string::npos);
  std::string objects;
  for (std::size_t i = 0; i < JsonValue::kMaxDepth + 1; ++i) objects += "{\"a\":";
  CHECK(refused(objects + "1" + std::string(JsonValue::kMaxDepth + 1, '}')).find("nested deeper") !=
        std::string::npos);
}

}  // namespace
}  // namespace ratewin::server
