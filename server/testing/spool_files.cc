#include "server/testing/spool_files.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <system_error>

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

namespace {

// The folders temp_dir made, removed when the test process exits: without it
// every run of the suite left ~100 MiB under /tmp, and CI shares that disk.
class TempDirsRemovedAtExit {
 public:
  void add(const std::filesystem::path& dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    dirs_.insert(dir);
  }
  ~TempDirsRemovedAtExit() {
    if (::getpid() != owner_) return;  // a forked child's exit leaves its parent's folders alone
    if (std::getenv("CASTSCOPE_KEEP_TEST_DIRS") != nullptr) return;  // kept to look into a failure
    for (const auto& dir : dirs_) {
      std::error_code ignored;  // a test's own leftovers must not fail its exit
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  const pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::set<std::filesystem::path> dirs_;
};

TempDirsRemovedAtExit& temp_dirs() {
  static TempDirsRemovedAtExit dirs;
  return dirs;
}

}  // namespace

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("castscope_collector_test_" + name + "_" +
                                                       std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  temp_dirs().add(dir);
  return dir;
}

}  // namespace castscope::collector::testing
