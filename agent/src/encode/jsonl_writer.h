// Renders records as JSON lines: protobuf's JSON mapping of
// castscope.v1.Event with proto field names, one event per line.
#pragma once

#include <cstdio>
#include <string>

#include "agent/src/record/cast_record.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/location_table.h"

namespace castscope {

// Who is recording: one process of a job (DataLoader worker, torchrun rank).
struct ProcessIdentity {
  uint32_t pid = 0;
  int32_t rank = -1;  // from RANK / LOCAL_RANK / WORLD_SIZE; -1 when unset
  int32_t local_rank = -1;
  int32_t world_size = -1;
};

// `location` is the record's interned location (ignored for cache samples).
std::string record_to_json(const Record& record, const OpMeta& op, const Location& location);
std::string stats_to_json(const EventLogStats& stats, const ProcessIdentity& identity, const std::string& torch_version,
                          uint64_t ts_ns,
                          const std::string& gpu_timing = "");

// Appends lines to a file; owned by the exporter thread only.
class JsonlWriter {
 public:
  JsonlWriter() = default;
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Returns an error message, empty on success.
  std::string open(const std::string& path);
  bool is_open() const { return file_ != nullptr; }
  void write_line(const std::string& line);
  void flush();
  void close();

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace castscope
