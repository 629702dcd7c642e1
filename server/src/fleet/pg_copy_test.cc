#include "server/src/fleet/pg_copy.h"

#include <gtest/gtest.h>

#include <string>

namespace castscope::collector::fleet {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(PgCopyBuffer, WritesTheSignatureHeaderRowsAndTrailer) {
  PgCopyBuffer buffer;
  buffer.begin_row(3);
  buffer.int2(-2);
  buffer.int8(0x0102030405060708);
  buffer.text("ab");
  const std::string data(buffer.finish());
  const std::string header = std::string("PGCOPY\n\xff\r\n\0", 11) + bytes({0, 0, 0, 0, 0, 0, 0, 0});
  const std::string row = bytes({0, 3}) + bytes({0, 0, 0, 2, 0xff, 0xfe}) +
                          bytes({0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}) + bytes({0, 0, 0, 2}) + "ab";
  EXPECT_EQ(data, header + row + bytes({0xff, 0xff}));
  EXPECT_EQ(buffer.rows(), 1u);
}

TEST(PgCopyBuffer, TimestampsCountFrom2000AndJsonbHasItsVersionByte) {
  PgCopyBuffer buffer;
  buffer.begin_row(2);
  buffer.timestamp_unix_ns(int64_t{946684800} * 1000000000 + 1000);  // 2000-01-01 00:00:00.000001 UTC
  buffer.jsonb("[]");
  const std::string data(buffer.finish());
  EXPECT_EQ(data.substr(19, 2 + 4 + 8), bytes({0, 2, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(data.substr(33, 4 + 3), bytes({0, 0, 0, 3, 1}) + "[]");
}

TEST(PgCopyBuffer, ClearStartsANewStream) {
  PgCopyBuffer buffer;
  buffer.begin_row(1);
  buffer.null();
  (void)buffer.finish();
  buffer.clear();
  EXPECT_EQ(buffer.rows(), 0u);
  EXPECT_EQ(std::string(buffer.finish()).size(), 19u + 2u);
}

}  // namespace
}  // namespace castscope::collector::fleet
