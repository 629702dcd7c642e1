// PostgreSQL's binary COPY format (the COPY documentation, "Binary Format"):
// a signature header, then per row a 16-bit field count and each field as a
// 32-bit length and its bytes in network order, then a -1 trailer. Binary
// COPY skips the server's text parsing, the largest cost of a text COPY of
// integer rows.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace castscope::collector::fleet {

class PgCopyBuffer {
 public:
  PgCopyBuffer() { clear(); }
  void clear() {
    static constexpr char kHeader[] = "PGCOPY\n\377\r\n\0";
    data_.assign(kHeader, sizeof(kHeader) - 1);  // 11 bytes: the NUL is part of it
    put32(0);  // flags
    put32(0);  // header extension length
    rows_ = 0;
    finished_ = false;
  }
  void begin_row(int16_t fields) {
    put16(static_cast<uint16_t>(fields));
    ++rows_;
  }
  void int2(int16_t v) { put32(2), put16(static_cast<uint16_t>(v)); }
  void int4(int32_t v) { put32(4), put32(static_cast<uint32_t>(v)); }
  void int8(int64_t v) { put32(8), put64(static_cast<uint64_t>(v)); }
  void boolean(bool v) { put32(1), data_.push_back(v ? 1 : 0); }
  void text(std::string_view v) {
    put32(static_cast<uint32_t>(v.size()));
    data_.append(v);
  }
  // timestamptz: microseconds since 2000-01-01 UTC.
  void timestamp_unix_ns(int64_t unix_ns) { int8(unix_ns / 1000 - kPgEpochUnixUs); }
  // jsonb: a version byte, then the JSON text.
  void jsonb(std::string_view json) {
    put32(static_cast<uint32_t>(json.size() + 1));
    data_.push_back(1);
    data_.append(json);
  }
  void null() { put32(0xffffffffu); }

  // The whole COPY stream, with its trailer.
  std::string_view finish() {
    if (!finished_) put16(0xffff);
    finished_ = true;
    return data_;
  }
  size_t rows() const { return rows_; }

  static constexpr int64_t kPgEpochUnixUs = int64_t{946684800} * 1000000;

 private:
  void put16(uint16_t v) {
    const char b[2] = {static_cast<char>(v >> 8), static_cast<char>(v)};
    data_.append(b, 2);
  }
  void put32(uint32_t v) {
    put16(static_cast<uint16_t>(v >> 16));
    put16(static_cast<uint16_t>(v));
  }
  void put64(uint64_t v) {
    put32(static_cast<uint32_t>(v >> 32));
    put32(static_cast<uint32_t>(v));
  }

  std::string data_;
  size_t rows_ = 0;
  bool finished_ = false;
};

}  // namespace castscope::collector::fleet
