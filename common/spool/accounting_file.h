// The agent's last word on a spool folder, for when its final batch cannot be
// written (a full disk) or it never finishes: one batch with no events that
// carries the run's accounting (events recorded and dropped, finished or
// not), kept in `accounting` beside the segments as one spool frame.
//
// The file's space is reserved when the spool opens, and each update
// rewrites the frame in place (pwrite at offset 0, never longer than the
// reservation), so it can still be written once the disk is full. A reader
// takes the frame only when its CRC holds; a torn rewrite reads as absent.
// The forwarder sends it after the last segment, and `castscope load`
// imports it, so the store learns the drops the lost batches cannot tell.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace castscope::spool {

inline constexpr const char* kAccountingFileName = "accounting";
inline constexpr uint64_t kAccountingFileBytes = 64 << 10;

class AccountingFile {
 public:
  AccountingFile() = default;
  ~AccountingFile();
  AccountingFile(const AccountingFile&) = delete;
  AccountingFile& operator=(const AccountingFile&) = delete;

  // Creates `agent_dir`/accounting (0600) with its space reserved. Returns an
  // error message, empty on success.
  std::string open(const std::string& agent_dir);
  bool is_open() const { return fd_ >= 0; }
  // Replaces the frame with `payload` (a serialized Batch). False when it
  // does not fit the reservation or the write fails.
  bool write(std::string_view payload);
  void close();

 private:
  int fd_ = -1;
};

// The payload of `agent_dir`/accounting, if the file holds a whole frame.
std::optional<std::string> read_accounting(const std::string& agent_dir);
// The same from the file's bytes (the parser, fuzzed).
std::optional<std::string> parse_accounting(std::string_view file);

}  // namespace castscope::spool
