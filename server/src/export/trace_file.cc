#include "server/src/export/trace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace castscope::collector {
namespace {
constexpr size_t kBufferBytes = 1 << 20;
}  // namespace

TraceFile::~TraceFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

Status TraceFile::open(const std::string& path) {
  path_ = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Status::failed_precondition("cannot write " + path + ": it is a folder; give a file name");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  // mkstemp: a fresh name, created O_EXCL with mode 0600.
  std::string pattern = (parent.empty() ? std::filesystem::path(".") : parent).string() + "/." +
                        std::filesystem::path(path).filename().string() + ".XXXXXX";
  fd_ = ::mkstemp(pattern.data());
  if (fd_ < 0) {
    const int error = errno;
    return Status::failed_precondition(
        "cannot write " + path + ": " + std::strerror(error) +
        (error == ENOENT ? " (the folder " + parent.string() + " does not exist)" : ""));
  }
  temporary_ = pattern;
  return {};
}

Status TraceFile::write_error(int error_number) const {
  return Status::internal("cannot write " + path_ + ": " +
                          (error_number != 0 ? std::strerror(error_number) : "write failed"));
}

Status TraceFile::write(std::string_view bytes) {
  buffer_.append(bytes);
  return buffer_.size() >= kBufferBytes ? flush() : Status();
}

Status TraceFile::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return write_error(n < 0 ? errno : 0);
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return {};
}

Status TraceFile::commit() {
  if (fd_ < 0) return Status::failed_precondition("cannot write " + path_ + ": not open");
  if (Status s = flush(); !s.ok()) return s;
  const bool synced = ::fsync(fd_) == 0;
  const int sync_error = errno;
  const bool closed = ::close(fd_) == 0;
  const int close_error = errno;
  fd_ = -1;
  if (!synced) return write_error(sync_error);
  if (!closed) return write_error(close_error);
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) return write_error(errno);
  temporary_.clear();
  return {};
}

}  // namespace castscope::collector
