// The text of a source line, read by the exporter thread once per location
// and sent with it, so that the viewer can show the line the user wrote
// without the collector ever reading files from its own disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace castscope {

inline constexpr size_t kMaxSourceLineBytes = 240;

// Line `line` (1-based) of the regular file `path`, leading and trailing
// blanks removed, cut to kMaxSourceLineBytes at a character boundary. Empty
// when there is no such file or line, the file is larger than 16 MiB, or the
// line is not valid UTF-8 (batches carry it as a protobuf string).
std::string read_source_line(const std::string& path, uint32_t line);

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates).
bool valid_utf8(const std::string& text);

}  // namespace castscope
