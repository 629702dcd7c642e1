#include "server/testing/spool_files.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <fstream>

#include "common/spool/spool_format.h"

namespace castscope::collector::testing {

std::string frame(const std::string& payload) {
  uint8_t header[spool::kFrameHeaderBytes];
  spool::put_u32le(header, spool::kFrameMagic);
  spool::put_u32le(header + 4, static_cast<uint32_t>(payload.size()));
  spool::put_u32le(header + 8, static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                                            reinterpret_cast<const Bytef*>(payload.data()),
                                                            static_cast<uInt>(payload.size()))));
  return std::string(reinterpret_cast<const char*>(header), sizeof(header)) + payload;
}

void write_segment(const std::filesystem::path& path, const std::vector<std::string>& frames) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(spool::kFileMagic, sizeof(spool::kFileMagic));
  for (const auto& f : frames) out << f;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("castscope_collector_test_" + name + "_" +
                                                       std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace castscope::collector::testing
