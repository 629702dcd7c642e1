// Spool files and scratch folders for the collector's tests and fuzzer seeds.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace castscope::collector::testing {

// `payload` as one spool frame: header (magic, length, CRC-32) and bytes.
std::string frame(const std::string& payload);

// A spool segment file of `frames`, its folders created.
void write_segment(const std::filesystem::path& path, const std::vector<std::string>& frames);

// A fresh, empty folder under the temp dir, unique to this process; removed
// with its contents when the process exits normally.
std::filesystem::path temp_dir(const std::string& name);

}  // namespace castscope::collector::testing
