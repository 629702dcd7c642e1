#include "server/src/cli/query_command.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "castscope/v1/transport.grpc.pb.h"
#include "server/src/store/ship_rollups.h"
#include "server/src/store/store_reader.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

// The store directly, or a collector's Query service: one interface.
class QuerySource {
 public:
  virtual ~QuerySource() = default;
  virtual Status list_runs(v1::ListRunsResponse& out) = 0;
  virtual Status query_events(const v1::EventFilter& filter, v1::QueryEventsResponse& out) = 0;
  virtual Status list_sequences(const v1::ListSequencesRequest& request, v1::ListSequencesResponse& out) = 0;
  virtual Status list_findings(const v1::ListFindingsRequest& request, v1::ListFindingsResponse& out) = 0;
};

class StoreSource final : public QuerySource {
 public:
  explicit StoreSource(std::unique_ptr<StoreReader> reader) : reader_(std::move(reader)) {}
  Status list_runs(v1::ListRunsResponse& out) override { return reader_->list_runs(out); }
  Status query_events(const v1::EventFilter& filter, v1::QueryEventsResponse& out) override {
    return reader_->query_events(filter, out);
  }
  Status list_sequences(const v1::ListSequencesRequest& request, v1::ListSequencesResponse& out) override {
    return reader_->list_sequences(request, out);
  }
  Status list_findings(const v1::ListFindingsRequest& request, v1::ListFindingsResponse& out) override {
    return reader_->list_findings(request, out);
  }

 private:
  std::unique_ptr<StoreReader> reader_;
};

class CollectorSource final : public QuerySource {
 public:
  CollectorSource(const std::string& address, std::string token, const std::string& tls_ca_pem)
      : address_(address),
        tls_(!tls_ca_pem.empty()),
        stub_(v1::Query::NewStub(grpc::CreateChannel(address, credentials(tls_ca_pem)))),
        token_(std::move(token)) {}

  Status list_runs(v1::ListRunsResponse& out) override {
    return call([&](grpc::ClientContext* c) { return stub_->ListRuns(c, v1::ListRunsRequest(), &out); });
  }
  Status query_events(const v1::EventFilter& filter, v1::QueryEventsResponse& out) override {
    return call([&](grpc::ClientContext* c) { return stub_->QueryEvents(c, filter, &out); });
  }
  Status list_sequences(const v1::ListSequencesRequest& request, v1::ListSequencesResponse& out) override {
    return call([&](grpc::ClientContext* c) { return stub_->ListSequences(c, request, &out); });
  }
  Status list_findings(const v1::ListFindingsRequest& request, v1::ListFindingsResponse& out) override {
    return call([&](grpc::ClientContext* c) { return stub_->ListFindings(c, request, &out); });
  }

 private:
  template <typename Call>
  Status call(Call&& rpc) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
    const grpc::Status status = rpc(&context);
    if (status.ok()) return {};
    // A TLS collector asked in plaintext only says it is unavailable.
    const bool maybe_tls = status.error_code() == grpc::StatusCode::UNAVAILABLE && !tls_;
    return Status::internal("collector " + address_ + ": " + status.error_message() + " (gRPC code " +
                            std::to_string(static_cast<int>(status.error_code())) + ")" +
                            (maybe_tls ? "; if it serves TLS, give --tls-ca with its CA certificate" : ""));
  }

  static std::shared_ptr<grpc::ChannelCredentials> credentials(const std::string& tls_ca_pem) {
    if (tls_ca_pem.empty()) return grpc::InsecureChannelCredentials();
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = tls_ca_pem;
    return grpc::SslCredentials(options);
  }

  std::string address_;
  bool tls_ = false;
  std::unique_ptr<v1::Query::Stub> stub_;
  std::string token_;
};

std::string to_json(const google::protobuf::Message& message, bool all_fields) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = all_fields;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

int fail(std::ostream& err, const Status& status) {
  err << "castscope-collector query: " << status.message() << "\n";
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int print_runs(QuerySource& source, std::ostream& out, std::ostream& err) {
  v1::ListRunsResponse runs;
  if (Status s = source.list_runs(runs); !s.ok()) return fail(err, s);
  out << "[";
  for (int i = 0; i < runs.runs_size(); ++i) out << (i ? ",\n" : "\n") << to_json(runs.runs(i), true);
  out << (runs.runs_size() ? "\n]\n" : "]\n");
  return 0;
}

int print_events(const QueryCommand& command, QuerySource& source, std::ostream& out, std::ostream& err) {
  v1::EventFilter filter;
  filter.set_run_id(command.run_id);
  filter.set_agent_id(command.agent_id);
  static const std::map<std::string, v1::EventFilter::Kind> kinds = {{"", v1::EventFilter::KIND_UNSPECIFIED},
                                                                      {"cast", v1::EventFilter::KIND_CAST},
                                                                      {"op", v1::EventFilter::KIND_OP},
                                                                      {"cache_sample", v1::EventFilter::KIND_CACHE_SAMPLE}};
  const auto kind = kinds.find(command.kind);
  if (kind == kinds.end())
    return fail(err, Status::invalid_argument("--kind " + command.kind + ": expected cast, op or cache_sample"));
  filter.set_kind(kind->second);
  filter.set_op(command.op);
  filter.set_file(command.file);
  filter.set_line(command.line);
  filter.set_after_seq(command.after_seq);
  filter.set_limit(command.limit);
  v1::QueryEventsResponse events;
  if (Status s = source.query_events(filter, events); !s.ok()) return fail(err, s);
  for (const v1::StoredEvent& event : events.events()) out << to_json(event, false) << "\n";
  if (events.truncated())
    err << "castscope-collector query: more events match than --limit " << events.events_size()
        << "; page on with --agent and --after-seq\n";
  return 0;
}

int print_sequences(const QueryCommand& command, QuerySource& source, std::ostream& out, std::ostream& err) {
  v1::ListRunsResponse runs;
  if (Status s = source.list_runs(runs); !s.ok()) return fail(err, s);
  nlohmann::json by_agent = nlohmann::json::object();
  for (const v1::RunSummary& run : runs.runs()) {
    if (run.run_id() != command.run_id) continue;
    for (const v1::AgentSummary& agent : run.agents()) {
      if (!command.agent_id.empty() && agent.identity().agent_id() != command.agent_id) continue;
      v1::ListSequencesRequest request;
      request.set_run_id(run.run_id());
      request.set_agent_id(agent.identity().agent_id());
      v1::ListSequencesResponse sequences;
      if (Status s = source.list_sequences(request, sequences); !s.ok()) return fail(err, s);
      by_agent[agent.identity().agent_id()] =
          std::vector<uint64_t>(sequences.batch_sequences().begin(), sequences.batch_sequences().end());
    }
  }
  out << by_agent.dump() << "\n";
  return 0;
}

// One finding per line: the stored JSON (as in the report) with its run.
int print_findings(const QueryCommand& command, QuerySource& source, std::ostream& out, std::ostream& err) {
  v1::ListFindingsRequest request;
  request.set_run_id(command.run_id);
  v1::ListFindingsResponse findings;
  if (Status s = source.list_findings(request, findings); !s.ok()) return fail(err, s);
  for (const v1::Finding& finding : findings.findings()) {
    nlohmann::json details = nlohmann::json::parse(finding.details_json(), nullptr, false);
    if (details.is_discarded() || !details.is_object()) details = nlohmann::json::object();
    details["run_id"] = finding.run_id();
    out << details.dump() << "\n";
  }
  return 0;
}

// Fleet shipping as the store records it (docs/fleet.md): works whether or
// not the collector runs.
int print_shipping(const std::string& db, std::ostream& out, std::ostream& err) {
  std::unique_ptr<StoreReader> reader;
  if (Status s = StoreReader::open(db, reader); !s.ok()) return fail(err, s);
  sqlite3* handle = reader->database().handle();
  std::map<std::string, std::string> state;
  ship::Backlog backlog;
  if (Status s = ship::read_states(handle, "", state); !s.ok()) return fail(err, reader->database().error(s.message()));
  if (Status s = ship::read_backlog(handle, backlog); !s.ok()) return fail(err, reader->database().error(s.message()));
  const auto value = [&state](const char* key) { return state.contains(key) ? state[key] : std::string(); };
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json answer = {
      {"shipping", !value("collector_id").empty()},
      {"collector_id", value("collector_id")},
      {"next_shipment", value("next_shipment").empty() ? 1 : std::stoll(value("next_shipment"))},
      {"backlog_rows", backlog.rows},
      {"sealed_shipment", backlog.first_sealed_shipment},
      {"lag_seconds", ship::lag_seconds(backlog, now_s)},
      {"last_error", value("last_error")},
      {"events_not_shipped", value("events_not_shipped").empty() ? 0 : std::stoll(value("events_not_shipped"))},
      {"last_success_unix_s", value("last_success_unix_s").empty() ? 0 : std::stoll(value("last_success_unix_s"))}};
  out << answer.dump() << "\n";
  return 0;
}

}  // namespace

int run_query(const QueryCommand& command, std::ostream& out, std::ostream& err) {
  if ((command.what == "events" || command.what == "sequences") && command.run_id.empty())
    return fail(err, Status::invalid_argument(command.what + " needs --run RUN_ID (see `query runs`)"));
  if (command.what == "shipping") {
    if (command.db.empty()) return fail(err, Status::invalid_argument("shipping is read from a store: give --db"));
    return print_shipping(command.db, out, err);
  }
  std::unique_ptr<QuerySource> source;
  if (!command.collector.empty()) {
    source = std::make_unique<CollectorSource>(command.collector, command.token, command.tls_ca_pem);
  } else {
    std::unique_ptr<StoreReader> reader;
    if (Status s = StoreReader::open(command.db, reader); !s.ok()) return fail(err, s);
    source = std::make_unique<StoreSource>(std::move(reader));
  }
  if (command.what == "runs") return print_runs(*source, out, err);
  if (command.what == "events") return print_events(command, *source, out, err);
  if (command.what == "sequences") return print_sequences(command, *source, out, err);
  if (command.what == "findings") return print_findings(command, *source, out, err);
  return fail(err, Status::invalid_argument("unknown query \"" + command.what +
                                            "\": expected runs, events, sequences, findings or shipping"));
}

}  // namespace castscope::collector
