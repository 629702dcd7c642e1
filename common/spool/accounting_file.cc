#include "common/spool/accounting_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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
  std::string data(sizeof(kFileMagic) + kFrameHeaderBytes, '\0');
  if (!in.read(data.data(), static_cast<std::streamsize>(data.size())) ||
      std::memcmp(data.data(), kFileMagic, sizeof(kFileMagic)) != 0)
    return std::nullopt;  // reserved but never written
  const auto* header = reinterpret_cast<const uint8_t*>(data.data() + sizeof(kFileMagic));
  const uint32_t length = get_u32le(header + 4);
  if (length > kAccountingFileBytes) return std::nullopt;
  data.resize(data.size() + length);
  if (!in.read(data.data() + sizeof(kFileMagic) + kFrameHeaderBytes, length)) return std::nullopt;
  FrameParser parser(std::string_view(data).substr(sizeof(kFileMagic)));
  std::string_view payload;
  if (!parser.next(payload) || !parser.problems().empty()) return std::nullopt;
  return std::string(payload);
}

}  // namespace castscope::spool
