#include "common/spool/accounting_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>

#include "common/spool/spool_format.h"
#include "common/spool/spool_reader.h"

namespace castscope::spool {

AccountingFile::~AccountingFile() { close(); }

std::string AccountingFile::open(const std::string& agent_dir) {
  close();
  const std::string path = agent_dir + "/" + kAccountingFileName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  // Blocks reserved now are what a rewrite uses once the disk is full.
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(kAccountingFileBytes)); rc != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return "cannot reserve " + std::to_string(kAccountingFileBytes) + " bytes for " + path + ": " + std::strerror(rc);
  }
  fd_ = fd;
  return "";
}

bool AccountingFile::write(std::string_view payload) {
  if (fd_ < 0) return false;
  const uint64_t bytes = sizeof(kFileMagic) + kFrameHeaderBytes + payload.size();
  if (bytes > kAccountingFileBytes) return false;
  std::string file(kFileMagic, sizeof(kFileMagic));
  file.resize(sizeof(kFileMagic) + kFrameHeaderBytes);
  auto* header = reinterpret_cast<uint8_t*>(file.data() + sizeof(kFileMagic));
  put_u32le(header, kFrameMagic);
  put_u32le(header + 4, static_cast<uint32_t>(payload.size()));
  put_u32le(header + 8, static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(payload.data()),
                                                    static_cast<uInt>(payload.size()))));
  file.append(payload);
  size_t done = 0;
  while (done < file.size()) {
    const ssize_t n = ::pwrite(fd_, file.data() + done, file.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void AccountingFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<std::string> read_accounting(const std::string& agent_dir) {
  std::ifstream in(agent_dir + "/" + kAccountingFileName, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data(kAccountingFileBytes, '\0');  // the file is never longer (a longer one: its start is read)
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return parse_accounting(data);
}

std::optional<std::string> parse_accounting(std::string_view file) {
  // Reserved but never written: zeros where the magic would be.
  if (file.size() < sizeof(kFileMagic) || file.substr(0, sizeof(kFileMagic)) != std::string_view(kFileMagic, sizeof(kFileMagic)))
    return std::nullopt;
  FrameParser parser(file.substr(sizeof(kFileMagic)));
  std::string_view payload;
  // The first frame, whole and right at the start; what follows it is an older frame's tail.
  if (!parser.next(payload) || !parser.problems().empty()) return std::nullopt;
  return std::string(payload);
}

}  // namespace castscope::spool
