#include "agent/src/encode/source_lines.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace castscope {
namespace {

std::string write_file(const std::string& text) {
  char path[] = "/tmp/castscope_source_XXXXXX";
  const int fd = ::mkstemp(path);
  ::close(fd);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(SourceLines, ReadsTheLineTrimmed) {
  const std::string path = write_file("import torch\n    y = model(x)  \r\n\nlast");
  EXPECT_EQ(read_source_line(path, 1), "import torch");
  EXPECT_EQ(read_source_line(path, 2), "y = model(x)");
  EXPECT_EQ(read_source_line(path, 3), "");
  EXPECT_EQ(read_source_line(path, 4), "last");
  EXPECT_EQ(read_source_line(path, 5), "");
  EXPECT_EQ(read_source_line(path, 0), "");
  std::remove(path.c_str());
}

TEST(SourceLines, NoFileNoText) {
  EXPECT_EQ(read_source_line("<string>", 1), "");
  EXPECT_EQ(read_source_line("/nonexistent/castscope.py", 1), "");
  EXPECT_EQ(read_source_line("/tmp", 1), "");  // a directory
}

TEST(SourceLines, CutAtACharacterBoundary) {
  std::string line(kMaxSourceLineBytes - 1, 'a');
  line += "\xC3\xA9\xC3\xA9";  // é é: the first straddles the cap
  const std::string path = write_file(line + "\n");
  const std::string text = read_source_line(path, 1);
  EXPECT_EQ(text.size(), kMaxSourceLineBytes - 1);
  EXPECT_TRUE(valid_utf8(text));
  std::remove(path.c_str());
}

TEST(SourceLines, InvalidUtf8IsDropped) {
  const std::string path = write_file("x = '\xE9t\xE9'\n");  // Latin-1
  EXPECT_EQ(read_source_line(path, 1), "");
  std::remove(path.c_str());
  EXPECT_TRUE(valid_utf8("plain \xE2\x82\xAC"));
  EXPECT_FALSE(valid_utf8("\xC0\x80"));          // overlong
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(valid_utf8("\xE2\x82"));          // cut short
}

}  // namespace
}  // namespace castscope
