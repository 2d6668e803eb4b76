// The server's JSON writer: commas, nesting, escaping and number forms, byte for byte
// (the server's bodies and log lines are written by it, and their bytes are pinned in
// their own tests).
#include "common/json_writer.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "common/json.h"
#include "common/text.h"

namespace ratewin::server {
namespace {

TEST_CASE("JsonWriter: commas between members and elements, none after a key or an opening") {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.key("a").number(1);
  w.key("b").begin_array();
  w.number(2).string("x").begin_object().end_object().begin_array().end_array();
  w.null().boolean(false).boolean(true);
  w.begin_object().key("c").begin_array().begin_array().number(3).end_array().end_array();
  w.end_object();
  w.end_array();
  w.key("d").begin_object().end_object();
  w.key("e").raw("{\"f\":[1,2]}");
  w.key("g").string("");
  w.end_object();
  CHECK(out ==
        R"({"a":1,"b":[2,"x",{},[],null,false,true,{"c":[[3]]}],"d":{},"e":{"f":[1,2]},"g":""})");

  CHECK(JsonValue::parse(out).ok());
}

TEST_CASE("JsonWriter: appends to what the string holds; members alone without braces") {
  std::string out = "x=";
  JsonWriter(out).begin_array().raw("1").raw("2").end_array();
  CHECK(out == "x=[1,2]");

  // As log lines take an event's members after their own.
  out.clear();
  JsonWriter members(out);
  members.key("event").string("e").key("n").number(-1);
  CHECK(out == R"("event":"e","n":-1)");

  // Values at the top level are separated too.
  out.clear();
  JsonWriter(out).number(1).string("a").null();
  CHECK(out == R"(1,"a",null)");
}

TEST_CASE("JsonWriter: keys and strings escaped by append_json_string") {
  const std::string odd = "q\"b\\s/\x01\x1f\x7f\n\t\xff\xc3\xa9\xe2\x82\xac\xed\xa0\x80";
  std::string out;
  JsonWriter(out).begin_object().key(odd).string(odd).end_object();
  const std::string escaped = R"("q\"b\\s/\u0001\u001f\u007f\u000a\u0009\ufffd)"
                              "\xc3\xa9\xe2\x82\xac"
                              R"(\ufffd\ufffd\ufffd")";
  CHECK(out == "{" + escaped + ":" + escaped + "}");
  std::string one;
  append_json_string(one, odd);
  CHECK(one == escaped);
}

TEST_CASE("JsonWriter: whole numbers of every integer type, doubles in their shortest form") {
  std::string out;
  JsonWriter w(out);
  w.begin_array();
  w.number(0).number(-7).number(std::numeric_limits<std::int64_t>::min());
  w.number(std::numeric_limits<std::int64_t>::max());
  w.number(std::numeric_limits<std::uint64_t>::max());
  w.number(std::uint8_t{200}).number(std::int16_t{-300}).number(std::uint32_t{4294967295U});
  w.number(std::size_t{12});
  w.end_array();
  CHECK(out ==
        "[0,-7,-9223372036854775808,9223372036854775807,18446744073709551615,200,-300,"
        "4294967295,12]");

  out.clear();
  JsonWriter d(out);
  d.begin_array();
  for (const double x : {0.0, -0.0, 3.0, 2.5, 0.1, 1.0 / 3, 1e-5, 0.001, 1e21, 123456.789, -1.5})
    d.number(x);
  d.end_array();
  CHECK(out == "[0,-0,3,2.5,0.1,0.3333333333333333,1e-05,0.001,1e+21,123456.789,-1.5]");
  // The form append_double writes, which the server wrote before the writer.
  std::string by_hand;
  append_double(by_hand, thousandths(1.23456));
  out.clear();
  JsonWriter(out).number(thousandths(1.23456));
  CHECK(out == by_hand);
  CHECK(out == "1.235");
}

}  // namespace
}  // namespace ratewin::server
