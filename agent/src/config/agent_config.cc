#include "agent/src/config/agent_config.h"

#include <climits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "agent/src/record/event_log.h"
#include "common/cli/host_port.h"
#include "common/json/json_limits.h"
#include "common/log/log.h"

namespace castscope {

using json = nlohmann::json;

namespace {

// Every key of the configuration and where it goes: one table. What each key
// holds, its range and its default are declared in
// docs/schema/agent-config.schema.json; agent_config_test.cc checks this table
// against every property there (tests/integration/test_agent_config_schema.py
// against what Python sends). JSON types are exact: a count is an integer
// (not 1.5, not true), a switch a boolean. The checks that involve more than
// one key come after the table.

// ASCII (non-ASCII as \u escapes), so cutting it never splits a character
// and the message stays valid UTF-8 wherever it is dumped again.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string expected(const std::string& key, const char* what, const json& value) {
  return "castscope: configuration key \"" + key + "\": expected " + what + ", got " + shown(value);
}

using Reader = std::string (*)(const std::string& key, const json& value, AgentConfig& config);
using Store = void (*)(AgentConfig& config, uint64_t value);

// A key is read by `read`, or it is an integer in [low, high] that `store`
// puts in place; `range` is the message when it is out of range.
struct Field {
  Field(std::string key, Reader read) : key(std::move(key)), read(read) {}
  Field(std::string key, uint64_t low, uint64_t high, std::string range, Store store)
      : key(std::move(key)), low(low), high(high), range(std::move(range)), store(store) {}

  std::string key;
  Reader read = nullptr;
  uint64_t low = 0, high = 0;
  std::string range;
  Store store = nullptr;
};

Field integer(const char* key, uint64_t low, uint64_t high, std::string range, Store store) {
  return Field(key, low, high, std::move(range), store);
}

// A string (null too where `nullable`: "not set").
template <std::string AgentConfig::*member, bool nullable = false>
std::string read_string(const std::string& key, const json& value, AgentConfig& config) {
  if (nullable && value.is_null()) {
    config.*member = "";
    return "";
  }
  if (!value.is_string()) return expected(key, nullable ? "a string or null" : "a string", value);
  config.*member = value.get<std::string>();
  return "";
}

// A boolean at `path` (a member, or a member of a member).
template <auto... path>
std::string read_bool(const std::string& key, const json& value, AgentConfig& config) {
  if (!value.is_boolean()) return expected(key, "true or false", value);
  (config .* ... .* path) = value.get<bool>();
  return "";
}

// A string that names one of `names`; `store` takes its index.
template <size_t n>
std::string read_name(const std::string& key, const json& value, const char* const (&names)[n], const char* what,
                      size_t& index) {
  if (value.is_string())
    for (index = 0; index < n; ++index)
      if (value.get<std::string>() == names[index]) return "";
  return expected(key, what, value);
}

// An integer in [low, high]; `range` says so when it is not.
bool integer_in(const json& value, uint64_t low, uint64_t high, uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    const int64_t signed_value = value.get<int64_t>();
    if (signed_value < 0) return false;  // every range here starts at 0 or 1
    out = static_cast<uint64_t>(signed_value);
  } else {
    return false;
  }
  return out >= low && out <= high;
}

std::string read_integer(const Field& field, const json& value, AgentConfig& config) {
  if (!value.is_number_integer()) return expected(field.key, "an integer", value);  // unsigned ones are integers too
  uint64_t number = 0;
  if (!integer_in(value, field.low, field.high, number)) return "castscope: " + field.range + " (got " + shown(value) + ")";
  field.store(config, number);
  return "";
}

constexpr uint64_t kIntMax = INT_MAX;
constexpr uint64_t kInt64Max = INT64_MAX;
constexpr uint64_t kUint64Max = UINT64_MAX;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// The four keys of a window schedule (window_schedule.h): <prefix>_steps,
// _every_steps, _max_ms and _every_ms. `min_steps` 0: a window of 0 steps
// means "always open".
template <auto section>
std::vector<Field> schedule_keys(const std::string& prefix, uint64_t min_steps) {
  using S = WindowScheduleConfig;  // the stores below convert to its types
  static_assert(std::is_same_v<decltype(S::steps), uint64_t> && std::is_same_v<decltype(S::max_ms), int64_t>);
  return {
      Field(prefix + "_steps", min_steps, kUint64Max,
            prefix + "_steps must be " + (min_steps == 0 ? "at least 0 (0: every step)" : "positive"),
            [](AgentConfig& c, uint64_t n) { (c.*section).schedule.steps = n; }),
      Field(prefix + "_every_steps", 0, kUint64Max, prefix + "_every_steps must be at least 0",
            [](AgentConfig& c, uint64_t n) { (c.*section).schedule.every_steps = n; }),
      Field(prefix + "_max_ms", 1, kInt64Max, prefix + "_max_ms must be positive",
            [](AgentConfig& c, uint64_t n) { (c.*section).schedule.max_ms = static_cast<int64_t>(n); }),
      Field(prefix + "_every_ms", 0, kInt64Max, prefix + "_every_ms must be at least 0",
            [](AgentConfig& c, uint64_t n) { (c.*section).schedule.every_ms = static_cast<int64_t>(n); }),
  };
}

// Keys renamed when the three schedules took one naming: still read, with a
// warning naming the new key.
constexpr std::pair<const char*, const char*> kRenamedKeys[] = {
    {"probe_iterations", "probe_steps"},
    {"probe_every_iterations", "probe_every_steps"},
    {"numerics_iterations", "numerics_steps"},
    {"numerics_every_iterations", "numerics_every_steps"},
    {"numerics_skip_capture_iterations", "numerics_skip_capture_steps"},
    {"gpu_window_steps", "gpu_steps"},
    {"gpu_window_max_ms", "gpu_max_ms"},
};

const char* renamed_to(const std::string& key) {
  for (const auto& [old_key, new_key] : kRenamedKeys)
    if (key == old_key) return new_key;
  return nullptr;
}

const std::string kIntRange = " (at most " + std::to_string(kIntMax) + ")";

// Every key the configuration takes, with its reader.
const std::vector<Field> kFields = [] {
  std::vector<Field> fields = {
      {"policy_files",
       [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
         if (!value.is_array()) return expected(key, "an array of policy file paths", value);
         std::vector<std::string> files;
         for (const json& file : value) {
           if (!file.is_string()) return expected(key, "an array of policy file paths (strings)", value);
           files.push_back(file.get<std::string>());
         }
         config.policy_files = std::move(files);
         return "";
       }},
      {"events_path", read_string<&AgentConfig::events_path, true>},
      {"record_events", read_bool<&AgentConfig::record_events>},
      {"explicit_casts", read_bool<&AgentConfig::explicit_casts>},
      {"module_scopes", read_bool<&AgentConfig::module_scopes>},
      {"aggregate", read_bool<&AgentConfig::aggregate>},
      integer("aggregate_max_keys", 16, kMaxAggregateKeys,
              "aggregate_max_keys must be between 16 and " + std::to_string(kMaxAggregateKeys),
              [](AgentConfig& c, uint64_t n) { c.aggregate_max_keys = n; }),
      integer("ring_records", 1, kMaxRingRecords, "ring_records must be between 1 and " + std::to_string(kMaxRingRecords),
              [](AgentConfig& c, uint64_t n) { c.ring_records = n; }),
      integer("max_threads", 1, 4096, "max_threads must be between 1 and 4096",
              [](AgentConfig& c, uint64_t n) { c.max_threads = n; }),
      integer("flush_interval_ms", 1, kIntMax, "flush_interval_ms must be positive" + kIntRange,
              [](AgentConfig& c, uint64_t n) { c.flush_interval_ms = static_cast<int>(n); }),
      integer("cache_sample_interval_ms", 1, kIntMax, "cache_sample_interval_ms must be positive" + kIntRange,
              [](AgentConfig& c, uint64_t n) { c.cache_sample_interval_ms = static_cast<int>(n); }),
      integer("cache_sample_every_misses", 0, kIntMax,
              "cache_sample_every_misses must be between 0 (off) and " + std::to_string(kIntMax),
              [](AgentConfig& c, uint64_t n) { c.cache_sample_every_misses = static_cast<int>(n); }),
      {"torch_version", read_string<&AgentConfig::torch_version>},
      {"internal_path_prefix", read_string<&AgentConfig::internal_path_prefix>},
      {"collector", read_string<&AgentConfig::collector, true>},
      {"spool_dir", read_string<&AgentConfig::spool_dir, true>},
      {"run_id", read_string<&AgentConfig::run_id>},
      {"command", read_string<&AgentConfig::command>},
      {"forwarder_path", read_string<&AgentConfig::forwarder_path>},
      {"token_env", read_string<&AgentConfig::token_env>},
      {"tls_ca", read_string<&AgentConfig::tls_ca>},
      integer("give_up_after_s", 0, 1 << 30, "give_up_after_s must be between 0 and " + std::to_string(1 << 30),
              [](AgentConfig& c, uint64_t n) { c.give_up_after_s = static_cast<int>(n); }),
      integer("batch_events", 1, 65536, "batch_events must be between 1 and 65536",
              [](AgentConfig& c, uint64_t n) { c.batch_events = n; }),
      integer("spool_max_bytes", 4096, kUint64Max, "spool_max_bytes must be at least spool_segment_bytes (4096 or more)",
              [](AgentConfig& c, uint64_t n) { c.spool_max_bytes = n; }),
      integer("spool_segment_bytes", 4096, kUint64Max, "spool_segment_bytes must be at least 4096",
              [](AgentConfig& c, uint64_t n) { c.spool_segment_bytes = n; }),
      integer("spool_backlog_bytes", 0, uint64_t{1} << 30, "spool_backlog_bytes must be between 0 and 1073741824",
              [](AgentConfig& c, uint64_t n) { c.spool_backlog_bytes = n; }),
      {"gpu_timing",
       [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
         using Mode = GpuTimingConfig::Mode;
         static const char* const kModes[] = {"auto", "on", "off"};  // Mode's order
         size_t mode = 0;
         std::string error = read_name(key, value, kModes, "\"auto\", \"on\" or \"off\"", mode);
         if (error.empty()) config.gpu.mode = static_cast<Mode>(mode);
         return error;
       }},
      {"cublaslt_logger", read_bool<&AgentConfig::gpu, &GpuTimingConfig::cublaslt_logger>},
      {"cublaslt_library",
       [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
         if (!value.is_string()) return expected(key, "a path to the loaded libcublasLt", value);
         config.gpu.cublaslt_library = value.get<std::string>();
         return "";
       }},
      {"cupti_library",
       [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
         if (!value.is_string()) return expected(key, "a path to libcupti", value);
         config.gpu.cupti_library = value.get<std::string>();
         return "";
       }},
      {"gpu_correlation_kind",
       [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
         // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0..2 are 3..5.
         static const char* const kKinds[] = {"CUSTOM0", "CUSTOM1", "CUSTOM2"};
         size_t kind = 0;
         std::string error = read_name(key, value, kKinds,
                                       "\"CUSTOM0\", \"CUSTOM1\" or \"CUSTOM2\" (Kineto uses CUSTOM0 and CUSTOM1)", kind);
         if (error.empty()) config.gpu.correlation_kind = 3 + static_cast<uint32_t>(kind);
         return error;
       }},
      integer("gpu_buffer_bytes", 4096, kGiB, "gpu_buffer_bytes must be between 4096 and 1 GiB",
              [](AgentConfig& c, uint64_t n) { c.gpu.buffer_bytes = n; }),
      integer("gpu_buffer_budget_bytes", 4096, kGiB, "gpu_buffer_budget_bytes must be between 4096 and 1 GiB",
              [](AgentConfig& c, uint64_t n) { c.gpu.buffer_budget_bytes = n; }),
      {"gpu_correlate",
       [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
         static const char* const kWhich[] = {"cuda_ops", "all_ops"};
         size_t which = 0;
         std::string error = read_name(key, value, kWhich, "\"cuda_ops\" or \"all_ops\"", which);
         if (error.empty()) config.gpu.correlate_all_ops = which == 1;
         return error;
       }},
  };
  auto append = [&fields](std::vector<Field> more) { fields.insert(fields.end(), more.begin(), more.end()); };
  append(schedule_keys<&AgentConfig::gpu>("gpu", 0));
  fields.emplace_back("probe", read_bool<&AgentConfig::probe, &ProbeConfig::enabled>);
  append(schedule_keys<&AgentConfig::probe>("probe", 1));
  fields.emplace_back("numerics", read_bool<&AgentConfig::numerics, &NumericsConfig::enabled>);
  append(schedule_keys<&AgentConfig::numerics>("numerics", 1));
  fields.push_back(integer("numerics_skip_capture_steps", 0, kUint64Max,
                           "numerics_skip_capture_steps must be at least 0 (0: no capture after a skip)",
                           [](AgentConfig& c, uint64_t n) { c.numerics.skip_capture_steps = n; }));
  return fields;
}();

const Field* find_field(const std::string& key) {
  for (const Field& field : kFields)
    if (key == field.key) return &field;
  return nullptr;
}

}  // namespace

std::vector<std::string> agent_config_keys() {
  std::vector<std::string> keys;
  for (const Field& field : kFields) keys.emplace_back(field.key);
  for (const auto& [old_key, new_key] : kRenamedKeys) keys.emplace_back(old_key);
  return keys;
}

std::string parse_agent_config(const char* text, AgentConfig& config) {
  if (text == nullptr) return "castscope: no configuration given";
  if (std::string error = json_limits_error(text, kMaxAgentConfigBytes, kMaxAgentConfigNesting); !error.empty())
    return "castscope: configuration " + error;
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // the only throw: the readers check types before every get<>()
    return std::string("castscope: configuration is not valid JSON: ") + e.what();
  }
  if (!doc.is_object()) return "castscope: configuration must be a JSON object";
  for (const auto& [given_key, value] : doc.items()) {
    std::string key = given_key;
    if (const char* new_key = renamed_to(key)) {
      if (doc.contains(new_key)) return "castscope: give " + std::string(new_key) + " or its old name " + key + ", not both";
      log::warn("configuration key " + key + " is deprecated; it is now " + new_key);
      key = new_key;
    }
    const Field* field = find_field(key);
    if (field == nullptr) return "castscope: unknown configuration key \"" + key + "\"";
    std::string error = field->read != nullptr ? field->read(key, value, config) : read_integer(*field, value, config);
    if (!error.empty() && key != given_key) error += " (given as " + given_key + ")";
    if (!error.empty()) return error;
  }
  if (config.policy_files.empty()) return "castscope: configuration names no policy_files";
  if (config.gpu.buffer_budget_bytes < config.gpu.buffer_bytes)
    return "castscope: gpu_buffer_budget_bytes must be at least gpu_buffer_bytes";
  if (config.spool_max_bytes < config.spool_segment_bytes)
    return "castscope: spool_max_bytes must be at least spool_segment_bytes";
  if (!config.collector.empty())
    if (std::string error = cli::grpc_address_error(config.collector, /*port_zero_ok=*/false); !error.empty())
      return "castscope: collector \"" + config.collector + "\": " + error;
  if (config.run_id.size() > 256) return "castscope: run_id is longer than 256 characters";
  return "";
}

}  // namespace castscope
