// The spool file format, shared by the agent (writer), the forwarder and the
// collector's loader (readers). Torch-free and protobuf-free.
//
//   file    := "CSSPOOL1" frame*
//   frame   := magic:u32le length:u32le crc32:u32le payload[length]
//   payload := one castscope.v1.Batch, protobuf wire format
//
// The frame magic lets a reader find the next frame after a corrupt one; the
// CRC-32 (zlib's) covers the payload. A spool directory holds one folder per
// agent, named by its agent id, with numbered segments 00000001.cspool, ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace castscope::spool {

inline constexpr char kFileMagic[8] = {'C', 'S', 'S', 'P', 'O', 'O', 'L', '1'};
inline constexpr uint32_t kFrameMagic = 0xC5CA57F0u;
inline constexpr size_t kFrameHeaderBytes = 12;
inline constexpr uint32_t kMaxFramePayload = 64u << 20;  // a batch is far smaller; guards corrupt lengths
inline constexpr const char* kSegmentSuffix = ".cspool";

inline void put_u32le(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline uint32_t get_u32le(const uint8_t* in) {
  return static_cast<uint32_t>(in[0]) | static_cast<uint32_t>(in[1]) << 8 | static_cast<uint32_t>(in[2]) << 16 |
         static_cast<uint32_t>(in[3]) << 24;
}

// "00000042.cspool"
inline std::string segment_name(uint32_t index) {
  std::string digits = std::to_string(index);
  return std::string(8 - std::min<size_t>(8, digits.size()), '0') + digits + kSegmentSuffix;
}

// 42 for ".../00000042.cspool" (0 for a name that is not a segment's).
inline uint32_t segment_index(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return static_cast<uint32_t>(std::strtoul(path.c_str() + (slash == std::string::npos ? 0 : slash + 1), nullptr, 10));
}

}  // namespace castscope::spool
