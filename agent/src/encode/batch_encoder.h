// Turns drained records into castscope.v1.Batch messages (wire format),
// the unit of streaming and of the spool files.
//
// Each batch is self-contained: every op name, argument name and location an
// event refers to is defined in the same batch, so any batch can be stored
// or replayed on its own, in any order.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "agent/src/encode/proto_wire.h"
#include "agent/src/encode/schema_versions.h"
#include "agent/src/record/cast_record.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/location_table.h"

namespace castscope {

// castscope.v1.AgentIdentity.
struct AgentIdentity {
  std::string run_id;
  std::string agent_id;
  uint32_t pid = 0;
  int32_t rank = -1;
  int32_t local_rank = -1;
  int32_t world_size = -1;
  std::string hostname;
  std::string torch_version;
  std::string command;
  std::string policy_hash;
  std::vector<std::string> policy_files;
  std::string castscope_version;  // the release this agent was built from
  bool aggregate = false;         // aggregate mode: counters instead of cast and op events
};

class BatchEncoder {
 public:
  explicit BatchEncoder(AgentIdentity identity) : identity_(std::move(identity)) {}

  // `location` is the record's interned location (id 0: none); ignored for cache samples.
  void add(const Record& record, const OpMeta& op, uint32_t location_id, const Location& location);
  void add_stats(const EventLogStats& stats, uint64_t ts_ns, const std::string& gpu_timing = "");

  size_t events() const { return events_; }
  // Events that are records of the event log (not the stats event): what a
  // lost batch takes from the log's recorded count.
  size_t record_events() const { return events_ - stats_events_; }
  size_t encoded_bytes() const { return body_.size(); }

  // Encodes the batch and starts the next one empty.
  std::string finish(uint64_t sequence, uint64_t recorded_total, uint64_t dropped_total, bool final);

  const AgentIdentity& identity() const { return identity_; }

 private:
  uint32_t intern_string(uint64_t key, const std::string& text);
  void define_location(uint32_t id, const Location& location);
  void append_event(uint32_t kind_field, const wire::Writer& message);

  AgentIdentity identity_;
  wire::Writer body_;       // Event fields, already framed
  wire::Writer tables_;     // InternedString / InternedLocation fields
  wire::Writer scratch_;    // one event being built
  wire::Writer nested_;     // a table entry
  wire::Writer packed_;     // packed repeated field of the event
  wire::Writer event_;      // the Event wrapper
  std::unordered_map<uint64_t, uint32_t> string_ids_;  // key: op id, or op id + arg index
  std::unordered_set<uint32_t> locations_defined_;
  size_t events_ = 0;
  size_t stats_events_ = 0;
};

}  // namespace castscope
