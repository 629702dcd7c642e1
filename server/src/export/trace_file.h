// A trace file being written: private (0600 whatever the umask, like every
// file castscope writes: traces name the user's source files and shapes),
// streamed into a temporary file beside the destination and renamed into
// place only when complete, so a failed or interrupted export leaves no half
// trace and an earlier file of the same name is replaced, never reused.
#pragma once

#include <string>
#include <string_view>

#include "server/src/status.h"

namespace castscope::collector {

class TraceFile {
 public:
  TraceFile() = default;
  ~TraceFile();  // removes the temporary file unless committed
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Creates the temporary file; an error names `path` and why (no such
  // folder, no permission).
  Status open(const std::string& path);
  int fd() const { return fd_; }
  // Buffered; for writers that do not write to fd() themselves.
  Status write(std::string_view bytes);
  const std::string& path() const { return path_; }
  // An error writing, naming the file: "cannot write FILE: why".
  Status write_error(int error_number) const;
  // Writes what write() buffered, syncs, closes and renames the temporary
  // file to `path`.
  Status commit();

 private:
  std::string path_;
  std::string temporary_;
  int fd_ = -1;
  std::string buffer_;
  Status flush();
};

}  // namespace castscope::collector
