#include "agent/src/config/agent_config.h"

#include <climits>
#include <nlohmann/json.hpp>

#include "agent/src/record/event_log.h"
#include "common/cli/host_port.h"
#include "common/json/json_limits.h"

namespace castscope {

using json = nlohmann::json;

namespace {

// Every key of the configuration, what it holds and its range: one table, so
// that docs/schema/agent-config.schema.json can be checked against it
// (agent_config_test.cc, tests/integration/test_agent_config_schema.py).
// JSON types are exact: a count is an integer (not 1.5, not true), a switch
// a boolean. The checks that involve more than one key come after the table.

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

struct Field {
  const char* key;
  Reader read;
};

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

template <bool AgentConfig::*member>
std::string read_bool(const std::string& key, const json& value, AgentConfig& config) {
  if (!value.is_boolean()) return expected(key, "true or false", value);
  config.*member = value.get<bool>();
  return "";
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

std::string read_integer(const std::string& key, const json& value, uint64_t low, uint64_t high, const std::string& range,
                         uint64_t& out) {
  if (!value.is_number_integer()) return expected(key, "an integer", value);  // unsigned ones are integers too
  if (!integer_in(value, low, high, out)) return "castscope: " + range + " (got " + shown(value) + ")";
  return "";
}

template <typename T, T AgentConfig::*member, uint64_t low, uint64_t high>
std::string read_count(const std::string& key, const json& value, AgentConfig& config, const std::string& range) {
  uint64_t number = 0;
  std::string error = read_integer(key, value, low, high, range, number);
  if (error.empty()) config.*member = static_cast<T>(number);
  return error;
}

constexpr uint64_t kIntMax = INT_MAX;
constexpr uint64_t kInt64Max = INT64_MAX;
constexpr uint64_t kUint64Max = UINT64_MAX;
const std::string kProbeRange = "probe_iterations and probe_max_ms must be positive, probe_every_ms at least 0";

const Field kFields[] = {
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
    {"aggregate", read_bool<&AgentConfig::aggregate>},
    {"aggregate_max_keys",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<size_t, &AgentConfig::aggregate_max_keys, 16, kMaxAggregateKeys>(
           key, value, config, "aggregate_max_keys must be between 16 and " + std::to_string(kMaxAggregateKeys));
     }},
    {"ring_records",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<size_t, &AgentConfig::ring_records, 1, kMaxRingRecords>(
           key, value, config, "ring_records must be between 1 and " + std::to_string(kMaxRingRecords));
     }},
    {"max_threads",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<size_t, &AgentConfig::max_threads, 1, 4096>(key, value, config,
                                                                      "max_threads must be between 1 and 4096");
     }},
    {"flush_interval_ms",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<int, &AgentConfig::flush_interval_ms, 1, kIntMax>(
           key, value, config, "flush_interval_ms must be positive (at most " + std::to_string(kIntMax) + ")");
     }},
    {"cache_sample_interval_ms",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<int, &AgentConfig::cache_sample_interval_ms, 1, kIntMax>(
           key, value, config, "cache_sample_interval_ms must be positive (at most " + std::to_string(kIntMax) + ")");
     }},
    {"cache_sample_every_misses",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<int, &AgentConfig::cache_sample_every_misses, 0, kIntMax>(
           key, value, config, "cache_sample_every_misses must be between 0 (off) and " + std::to_string(kIntMax));
     }},
    {"torch_version", read_string<&AgentConfig::torch_version>},
    {"internal_path_prefix", read_string<&AgentConfig::internal_path_prefix>},
    {"collector", read_string<&AgentConfig::collector, true>},
    {"spool_dir", read_string<&AgentConfig::spool_dir, true>},
    {"run_id", read_string<&AgentConfig::run_id>},
    {"command", read_string<&AgentConfig::command>},
    {"forwarder_path", read_string<&AgentConfig::forwarder_path>},
    {"token_env", read_string<&AgentConfig::token_env>},
    {"tls_ca", read_string<&AgentConfig::tls_ca>},
    {"give_up_after_s",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<int, &AgentConfig::give_up_after_s, 0, 1 << 30>(
           key, value, config, "give_up_after_s must be between 0 and " + std::to_string(1 << 30));
     }},
    {"batch_events",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<size_t, &AgentConfig::batch_events, 1, 65536>(key, value, config,
                                                                        "batch_events must be between 1 and 65536");
     }},
    {"spool_max_bytes",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<uint64_t, &AgentConfig::spool_max_bytes, 4096, kUint64Max>(
           key, value, config, "spool_max_bytes must be at least spool_segment_bytes (4096 or more)");
     }},
    {"spool_segment_bytes",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_count<uint64_t, &AgentConfig::spool_segment_bytes, 4096, kUint64Max>(
           key, value, config, "spool_segment_bytes must be at least 4096");
     }},
    {"gpu_timing",
     [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
       using Mode = GpuTimingConfig::Mode;
       static const std::pair<const char*, Mode> kModes[] = {{"auto", Mode::kAuto}, {"on", Mode::kOn}, {"off", Mode::kOff}};
       if (value.is_string())
         for (const auto& [name, mode] : kModes)
           if (value.get<std::string>() == name) {
             config.gpu.mode = mode;
             return "";
           }
       return expected(key, "\"auto\", \"on\" or \"off\"", value);
     }},
    {"cublaslt_logger",
     [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
       if (!value.is_boolean()) return expected(key, "true or false", value);
       config.gpu.cublaslt_logger = value.get<bool>();
       return "";
     }},
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
       static const char* kKinds[] = {"CUSTOM0", "CUSTOM1", "CUSTOM2"};
       if (value.is_string())
         for (uint32_t i = 0; i < 3; ++i)
           if (value.get<std::string>() == kKinds[i]) {
             config.gpu.correlation_kind = 3 + i;
             return "";
           }
       return expected(key, "\"CUSTOM0\", \"CUSTOM1\" or \"CUSTOM2\" (Kineto uses CUSTOM0 and CUSTOM1)", value);
     }},
    {"gpu_buffer_bytes",
     [](const std::string& key, const json& value, AgentConfig& config) {
       uint64_t bytes = 0;
       std::string error = read_integer(key, value, 4096, uint64_t{1} << 30, "gpu_buffer_bytes must be between 4096 and 1 GiB", bytes);
       if (error.empty()) config.gpu.buffer_bytes = static_cast<size_t>(bytes);
       return error;
     }},
    {"gpu_buffer_budget_bytes",
     [](const std::string& key, const json& value, AgentConfig& config) {
       uint64_t bytes = 0;
       std::string error = read_integer(key, value, 4096, uint64_t{1} << 30, "gpu_buffer_budget_bytes must be between 4096 and 1 GiB", bytes);
       if (error.empty()) config.gpu.buffer_budget_bytes = static_cast<size_t>(bytes);
       return error;
     }},
    {"gpu_correlate",
     [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
       if (value == "cuda_ops" || value == "all_ops") {
         config.gpu.correlate_all_ops = value == "all_ops";
         return "";
       }
       return expected(key, "\"cuda_ops\" or \"all_ops\"", value);
     }},
    {"gpu_window_steps",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_integer(key, value, 0, kUint64Max, "gpu_window_steps must be at least 0 (0: every step)",
                           config.gpu.windows.window_steps);
     }},
    {"gpu_every_steps",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_integer(key, value, 0, kUint64Max, "gpu_every_steps must be at least 0", config.gpu.windows.every_steps);
     }},
    {"gpu_window_max_ms",
     [](const std::string& key, const json& value, AgentConfig& config) {
       uint64_t ms = 0;
       std::string error = read_integer(key, value, 1, kInt64Max, "gpu_window_max_ms must be positive", ms);
       if (error.empty()) config.gpu.windows.window_max_ms = static_cast<int64_t>(ms);
       return error;
     }},
    {"gpu_every_ms",
     [](const std::string& key, const json& value, AgentConfig& config) {
       uint64_t ms = 0;
       std::string error = read_integer(key, value, 0, kInt64Max, "gpu_every_ms must be at least 0", ms);
       if (error.empty()) config.gpu.windows.every_ms = static_cast<int64_t>(ms);
       return error;
     }},
    {"probe",
     [](const std::string& key, const json& value, AgentConfig& config) -> std::string {
       if (!value.is_boolean()) return expected(key, "true or false", value);
       config.probe.enabled = value.get<bool>();
       return "";
     }},
    {"probe_iterations",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_integer(key, value, 1, kUint64Max, kProbeRange, config.probe.iterations);
     }},
    {"probe_every_iterations",
     [](const std::string& key, const json& value, AgentConfig& config) {
       return read_integer(key, value, 0, kUint64Max, "probe_every_iterations must be at least 0",
                           config.probe.every_iterations);
     }},
    {"probe_max_ms",
     [](const std::string& key, const json& value, AgentConfig& config) {
       uint64_t ms = 0;
       std::string error = read_integer(key, value, 1, kInt64Max, kProbeRange, ms);
       if (error.empty()) config.probe.max_ms = static_cast<int64_t>(ms);
       return error;
     }},
    {"probe_every_ms",
     [](const std::string& key, const json& value, AgentConfig& config) {
       uint64_t ms = 0;
       std::string error = read_integer(key, value, 0, kInt64Max, kProbeRange, ms);
       if (error.empty()) config.probe.every_ms = static_cast<int64_t>(ms);
       return error;
     }},
};

const Field* find_field(const std::string& key) {
  for (const Field& field : kFields)
    if (key == field.key) return &field;
  return nullptr;
}

}  // namespace

std::vector<std::string> agent_config_keys() {
  std::vector<std::string> keys;
  for (const Field& field : kFields) keys.emplace_back(field.key);
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
  for (const auto& [key, value] : doc.items()) {
    const Field* field = find_field(key);
    if (field == nullptr) return "castscope: unknown configuration key \"" + key + "\"";
    if (std::string error = field->read(key, value, config); !error.empty()) return error;
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
