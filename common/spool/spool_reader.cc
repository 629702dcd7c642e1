#include "common/spool/spool_reader.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/spool/spool_format.h"

namespace castscope::spool {

namespace {

uint32_t crc_of(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

// Could these last few bytes be the start of a frame header still being written?
bool get_u32le_prefix_matches(const uint8_t* bytes, uint64_t left) {
  uint8_t magic[4];
  put_u32le(magic, kFrameMagic);
  return std::memcmp(bytes, magic, std::min<uint64_t>(left, 4)) == 0;
}

}  // namespace

bool FrameParser::next(std::string_view& payload) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(data_.data());
  uint64_t corrupt_from = UINT64_MAX;
  auto report_corrupt = [&](uint64_t until, const char* what) {
    if (corrupt_from == UINT64_MAX) return;
    problems_.push_back({file_, base_ + corrupt_from,
                         std::string(what) + ", skipped " + std::to_string(until - corrupt_from) + " bytes"});
    corrupt_from = UINT64_MAX;
  };
  const char* why = "corrupt frame";
  while (pos_ < data_.size()) {
    const uint64_t left = data_.size() - pos_;
    if (left < kFrameHeaderBytes) {
      if (corrupt_from == UINT64_MAX && get_u32le_prefix_matches(bytes + pos_, left)) {
        incomplete_tail_ = true;
        return false;
      }
      corrupt_from = std::min(corrupt_from, pos_);
      pos_ = data_.size();
      break;
    }
    const uint32_t magic = get_u32le(bytes + pos_);
    const uint32_t length = get_u32le(bytes + pos_ + 4);
    if (magic != kFrameMagic || length > kMaxFramePayload) {
      if (corrupt_from == UINT64_MAX) why = magic != kFrameMagic ? "bad frame magic" : "frame length over the limit";
      corrupt_from = std::min(corrupt_from, pos_);
      ++pos_;
      continue;
    }
    if (left - kFrameHeaderBytes < length) {
      if (corrupt_from != UINT64_MAX) {  // garbage, then a frame cut short: the garbage is the problem
        report_corrupt(pos_, why);
      }
      incomplete_tail_ = true;
      return false;
    }
    const std::string_view body = data_.substr(pos_ + kFrameHeaderBytes, length);
    if (crc_of(body) != get_u32le(bytes + pos_ + 8)) {
      if (corrupt_from == UINT64_MAX) why = "CRC mismatch";
      corrupt_from = std::min(corrupt_from, pos_);
      ++pos_;
      continue;
    }
    report_corrupt(pos_, why);
    pos_ += kFrameHeaderBytes + length;
    payload = body;
    return true;
  }
  report_corrupt(pos_, why);
  return false;
}

SegmentContents read_segment(const std::string& path, uint64_t offset) {
  SegmentContents out;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.problems.push_back({path, 0, "cannot open"});
    return out;
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg()));
  const bool from_start = offset == 0;
  if (offset > size) {
    out.problems.push_back({path, offset, "offset past the end of the file (truncated since?)"});
    return out;
  }
  std::string data(size - offset, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  std::string_view frames(data);
  if (from_start) {
    const std::string_view magic(kFileMagic, sizeof(kFileMagic));
    if (frames.size() < magic.size()) {
      out.incomplete_tail = frames == magic.substr(0, frames.size());
      if (!out.incomplete_tail) out.problems.push_back({path, 0, "not a castscope spool file (bad file magic)"});
      return out;
    }
    if (frames.substr(0, magic.size()) != magic) {
      out.problems.push_back({path, 0, "not a castscope spool file (bad file magic)"});
      return out;
    }
    frames.remove_prefix(magic.size());
    offset = magic.size();
  }
  FrameParser parser(frames, path, offset);
  std::string_view payload;
  while (parser.next(payload)) out.payloads.emplace_back(payload);
  out.problems = parser.problems();
  out.complete_bytes = offset + parser.consumed();
  out.incomplete_tail = parser.incomplete_tail();
  return out;
}

std::vector<std::string> list_segments(const std::string& agent_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(agent_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && name.size() > 7 && name.ends_with(kSegmentSuffix)) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());  // zero-padded numbers sort in write order
  return out;
}

std::vector<std::string> list_agent_dirs(const std::string& spool_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(spool_dir, ec))
    if (entry.is_directory(ec)) out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace castscope::spool
