#include "agent/src/encode/source_lines.h"

#include <sys/stat.h>

#include <fstream>

namespace castscope {

namespace {

constexpr off_t kMaxFileBytes = 16 << 20;

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

bool valid_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t length = 0;
    uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, code = c & 0x07;
    } else {
      return false;
    }
    if (i + length > n) return false;
    for (size_t k = 1; k < length; ++k) {
      if (!is_continuation(s[i + k])) return false;
      code = (code << 6) | (s[i + k] & 0x3F);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

std::string read_source_line(const std::string& path, uint32_t line) {
  struct stat st {};
  if (line == 0 || path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxFileBytes)
    return {};
  std::ifstream in(path, std::ios::binary);
  std::string text;
  for (uint32_t n = 0; n < line; ++n)
    if (!std::getline(in, text)) return {};
  const size_t first = text.find_first_not_of(" \t\r\f\v");
  if (first == std::string::npos) return {};
  text = text.substr(first, text.find_last_not_of(" \t\r\f\v") - first + 1);
  if (!valid_utf8(text)) return {};
  if (text.size() > kMaxSourceLineBytes) {
    size_t cut = kMaxSourceLineBytes;
    while (cut > 0 && is_continuation(static_cast<unsigned char>(text[cut]))) --cut;
    text.resize(cut);
  }
  return text;
}

}  // namespace castscope
