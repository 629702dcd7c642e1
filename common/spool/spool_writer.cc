#include "common/spool/spool_writer.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/spool/spool_format.h"
#include "common/spool/spool_reader.h"

namespace castscope {
namespace {

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

SpoolWriter::Failure failure_of(int error_number) {
  return error_number == ENOSPC || error_number == EDQUOT ? SpoolWriter::Failure::kNoSpace : SpoolWriter::Failure::kIo;
}

}  // namespace

const char* SpoolWriter::failure_name(Failure failure) {
  switch (failure) {
    case Failure::kNone:
      return "none";
    case Failure::kFolderFull:
      return "spool folder at its size cap";
    case Failure::kNoSpace:
      return "no space left on the spool's disk";
    case Failure::kTooLarge:
      return "batch larger than the spool can hold (frame limit or spool_max_bytes)";
    case Failure::kIo:
      break;
  }
  return "spool write error";
}

SpoolWriter::~SpoolWriter() { close(); }

bool SpoolWriter::fail(Failure failure, std::string message) {
  failure_ = failure;
  error_ = std::move(message);
  return false;
}

std::string SpoolWriter::open(const std::string& agent_dir, uint64_t segment_bytes, uint64_t max_total_bytes) {
  close();
  std::error_code ec;
  std::filesystem::create_directories(agent_dir, ec);
  if (ec) return "cannot create spool folder " + agent_dir + ": " + ec.message();
  ::chmod(agent_dir.c_str(), 0700);  // events name the user's files and functions
  dir_ = agent_dir;
  segment_bytes_ = segment_bytes;
  max_total_bytes_ = max_total_bytes;
  uint32_t last = 0;
  for (const auto& path : spool::list_segments(dir_))
    last = std::max(last, spool::segment_index(path));
  if (!open_segment(last + 1)) return error_;
  return "";
}

bool SpoolWriter::open_segment(uint32_t index) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  total_at_rotation_ = bytes_on_disk();
  const std::string path = dir_ + "/" + spool::segment_name(index);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return fail(failure_of(errno), "cannot create spool segment " + path + ": " + std::strerror(errno));
  if (!write_all(fd, spool::kFileMagic, sizeof(spool::kFileMagic))) {
    const int error_number = errno;
    ::close(fd);
    ::unlink(path.c_str());  // the next try reuses the number: no empty segments left behind
    return fail(failure_of(error_number), "cannot write spool segment " + path + ": " + std::strerror(error_number));
  }
  fd_ = fd;
  segment_ = index;
  segment_size_ = sizeof(spool::kFileMagic);
  segment_limit_ = segment_bytes_;
  struct statvfs disk {};
  if (::fstatvfs(fd, &disk) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize;
    segment_limit_ = std::min(segment_bytes_, std::max(kMinSegmentBytes, free_bytes / 8));
  }
  return true;
}

uint64_t SpoolWriter::bytes_on_disk() const {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& path : spool::list_segments(dir_)) total += std::filesystem::file_size(path, ec);
  return total;
}

bool SpoolWriter::append(std::string_view payload) {
  if (fd_ < 0 && !dir_.empty() && !open_segment(segment_ + 1)) return false;
  if (fd_ < 0) return false;
  const uint64_t frame_bytes = spool::kFrameHeaderBytes + payload.size();
  if (payload.size() > spool::kMaxFramePayload)
    return fail(Failure::kTooLarge,
                "batch of " + std::to_string(payload.size()) + " bytes is over the spool frame limit");
  // One that the folder could not hold even empty: no amount of waiting helps.
  if (sizeof(spool::kFileMagic) + frame_bytes > max_total_bytes_)
    return fail(Failure::kTooLarge, "batch of " + std::to_string(payload.size()) +
                                        " bytes is larger than the spool folder's cap (spool_max_bytes " +
                                        std::to_string(max_total_bytes_) + ")");
  if (segment_size_ > sizeof(spool::kFileMagic) && segment_size_ + frame_bytes > segment_limit_) {
    if (!open_segment(segment_ + 1)) return false;
  }
  if (total_at_rotation_ + segment_size_ + frame_bytes > max_total_bytes_) {
    // The forwarder deletes acknowledged segments: look again before refusing.
    total_at_rotation_ = bytes_on_disk() - segment_size_;
    if (total_at_rotation_ + segment_size_ + frame_bytes > max_total_bytes_)
      return fail(Failure::kFolderFull,
                  "spool folder " + dir_ + " is full (" + std::to_string(max_total_bytes_) + " bytes)");
  }
  std::string frame(spool::kFrameHeaderBytes, '\0');
  auto* header = reinterpret_cast<uint8_t*>(frame.data());
  spool::put_u32le(header, spool::kFrameMagic);
  spool::put_u32le(header + 4, static_cast<uint32_t>(payload.size()));
  spool::put_u32le(header + 8, static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(payload.data()),
                                                           static_cast<uInt>(payload.size()))));
  frame.append(payload);
  if (!write_all(fd_, frame.data(), frame.size())) {
    const int error_number = errno;
    // A partial frame may be on disk: cut it off (shrinking needs no space),
    // or, if that fails, go on in a fresh segment so it hides no later frame.
    if (::ftruncate(fd_, static_cast<off_t>(segment_size_)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    return fail(failure_of(error_number), "cannot write spool segment " + dir_ + "/" +
                                              spool::segment_name(segment_) + ": " + std::strerror(error_number));
  }
  segment_size_ += frame.size();
  failure_ = Failure::kNone;
  return true;
}

void SpoolWriter::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace castscope
