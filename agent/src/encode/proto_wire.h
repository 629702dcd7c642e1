// Writes the protobuf wire format (varints, length-delimited fields).
//
// The agent cannot link libprotobuf: libtorch exports its own copy of
// protobuf's symbols, and two protobufs in one process clash (see
// docs/architecture.md). The format itself is small and stable; field
// numbers come from the generated castscope/v1/*.wire.h (proto/generator),
// and unit tests parse everything written here with the real generated code.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

namespace castscope::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2 };

class Writer {
 public:
  void varint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>(value | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }
  void tag(uint32_t field, WireType type) { varint((static_cast<uint64_t>(field) << 3) | type); }

  // proto3 leaves zero values out; parsers read them as zero either way.
  void u64(uint32_t field, uint64_t value) {
    if (value == 0) return;
    tag(field, kVarint);
    varint(value);
  }
  // int32/int64/enum: negative numbers are ten-byte two's-complement varints.
  void i64(uint32_t field, int64_t value) { u64(field, static_cast<uint64_t>(value)); }
  void boolean(uint32_t field, bool value) { u64(field, value ? 1 : 0); }
  // sint32: zigzag, so small negative numbers stay short.
  void s32(uint32_t field, int32_t value) {
    u64(field, (static_cast<uint32_t>(value) << 1) ^ static_cast<uint32_t>(value >> 31));
  }
  // double: fixed64, little-endian (the agent's platforms are).
  void f64(uint32_t field, double value) {
    if (value == 0) return;
    tag(field, kFixed64);
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(bits >> (8 * i)));
  }
  void bytes(uint32_t field, std::string_view value) {
    if (value.empty()) return;
    tag(field, kLengthDelimited);
    varint(value.size());
    out_.append(value);
  }
  // An embedded message, even when empty (a oneof member must be present).
  void message(uint32_t field, std::string_view encoded) {
    tag(field, kLengthDelimited);
    varint(encoded.size());
    out_.append(encoded);
  }
  // Packed repeated varints; `encoded` holds the varints back to back.
  void packed(uint32_t field, std::string_view encoded) { bytes(field, encoded); }

  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }
  void clear() { out_.clear(); }
  size_t size() const { return out_.size(); }

 private:
  std::string out_;
};

}  // namespace castscope::wire
