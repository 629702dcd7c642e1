// Reads the store for the Query service and `castscope-collector query`.
// Its own read-only connection: under WAL it reads committed data while a
// writer (in this process or another) goes on. Not thread-safe; one per user
// or behind a mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "castscope/v1/transport.pb.h"
#include "server/src/status.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

inline constexpr uint32_t kMaxQueryEvents = 10000;

class StoreReader {
 public:
  static Status open(const std::string& path, std::unique_ptr<StoreReader>& out);

  Status list_runs(castscope::v1::ListRunsResponse& out);
  // Events of one run, ordered by agent (first seen first), then seq.
  Status query_events(const castscope::v1::EventFilter& filter, castscope::v1::QueryEventsResponse& out);
  Status list_sequences(const castscope::v1::ListSequencesRequest& request,
                        castscope::v1::ListSequencesResponse& out);
  Status list_findings(const castscope::v1::ListFindingsRequest& request,
                       castscope::v1::ListFindingsResponse& out);

  // Building blocks for other readers of the store (the viewer's queries).
  // The agents of a run (one when `agent_id` is given), first seen first;
  // none when the run or agent is not stored. kKeys: `row` and `agent_id`
  // alone, all a reader of their events needs (read_agent_keys).
  enum class AgentColumns { kKeys, kWhole };
  Status find_agents(const std::string& run_id, const std::string& agent_id, std::vector<StoredAgent>& out,
                     AgentColumns columns = AgentColumns::kKeys);
  // Strings and locations by id, cached until the next query_events.
  StoreResolver& resolver() { return resolver_; }
  Database& database() { return db_; }

  // Whole-store figures for /metrics: findings stored now by (kind,
  // severity), and events the agents dropped, summed over every agent.
  struct Totals {
    std::map<std::pair<std::string, std::string>, int64_t> findings;
    int64_t agent_events_dropped = 0;
    int64_t runs = 0, agents = 0;
  };
  Status totals(Totals& out);

  // Findings stored per run, by severity: run_id -> severity -> count (the
  // Runs page's counts; runs without findings are absent).
  // Where an agent lost events, from its stored batches in sequence order:
  // drops an agent counted (ring full, no ring) between two batches, over the
  // span from the earlier batch's last event to the later one's; and batches
  // that never arrived (a sequence gap), between the batches either side.
  // Times in the agent's clock; a store before version 21 has none (empty).
  struct BatchLoss {
    int64_t t0_ns = 0, t1_ns = 0;
    int64_t events_dropped = 0, batches_missing = 0;
  };
  // `last_dropped`: the agent's drops as its batches counted them (the
  // agents row may count more: an accounting file's, after the last batch).
  // Drops before any batch with an event time come last in `out` with
  // t0_ns = t1_ns = 0 (the caller places them). `known` false: a batch was
  // stored before version 21, whose drops and times are unknown; `out` empty.
  Status batch_losses(int64_t agent_row, std::vector<BatchLoss>& out, int64_t& last_dropped, bool& known);

  Status finding_counts(std::map<std::string, std::map<std::string, int64_t>>& out);

 private:
  // Which events of a kind to read: every filter value is a bound parameter.
  struct SiteFilter {
    int64_t op = 0;    // a strings id; 0: any op
    std::string file;  // empty: any site
    uint32_t line = 0;  // with `file`; 0: any line
  };
  Status find_run(const std::string& run_id, int64_t& run);  // run 0: not stored
  Status read_kind(castscope::v1::EventFilter::Kind kind, const StoredAgent& agent, const SiteFilter& site,
                   uint64_t after_seq, uint32_t limit, std::vector<castscope::v1::StoredEvent>& out);

  Database db_;
  StoreResolver resolver_;
};

}  // namespace castscope::collector
