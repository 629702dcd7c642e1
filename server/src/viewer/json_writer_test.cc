#include "server/src/viewer/json_writer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace castscope::collector::viewer {
namespace {

using nlohmann::json;

TEST(JsonWriter, WritesWhatNlohmannReadsBack) {
  JsonWriter w;
  w.begin_object();
  w.key("n").value(int64_t{-42});
  w.key("big").value(uint64_t{18446744073709551615u});
  w.key("list").begin_array().value(1u).value(true).null().begin_object().end_object().begin_array().end_array().end_array();
  w.key("s").value("a\"b\\c\n\t\x01 <script>/");
  w.key("nested").begin_object().key("x").value(int32_t{7}).end_object();
  w.end_object();
  const json back = json::parse(w.text());
  EXPECT_EQ(back["n"], -42);
  EXPECT_EQ(back["big"].get<uint64_t>(), 18446744073709551615u);
  EXPECT_EQ(back["list"], json::parse(R"([1, true, null, {}, []])"));
  EXPECT_EQ(back["s"], "a\"b\\c\n\t\x01 <script>/");
  EXPECT_EQ(back["nested"]["x"], 7);
}

TEST(JsonWriter, EscapesStringsAsNlohmannDumpWithReplace) {
  // Valid UTF-8 (2, 3 and 4 bytes) passes as is; control characters are escaped.
  for (const std::string& text : {std::string("plain"), std::string("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
                                 std::string("tab\tnl\ncr\rff\fbs\b\x1f"), std::string("\"quoted\" \\back\\")}) {
    JsonWriter w;
    w.value(text);
    EXPECT_EQ(w.text(), json(text).dump(-1, ' ', false, json::error_handler_t::replace)) << text;
  }
  // Bytes that are not UTF-8 (a lone continuation, an overlong, a surrogate, past U+10FFFF, a cut sequence)
  // become U+FFFD, and the output is valid JSON that parses back.
  for (const std::string& text : {std::string("a\x80z"), std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
                                 std::string("\xF4\x90\x80\x80"), std::string("end\xE2\x82")}) {
    JsonWriter w;
    w.value(text);
    const json back = json::parse(w.text());
    EXPECT_NE(back.get<std::string>().find("\xEF\xBF\xBD"), std::string::npos) << w.text();
  }
}

}  // namespace
}  // namespace castscope::collector::viewer
