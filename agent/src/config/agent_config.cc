#include "agent/src/config/agent_config.h"

#include <nlohmann/json.hpp>

#include "agent/src/record/event_log.h"

namespace castscope {

using json = nlohmann::json;

std::string parse_agent_config(const char* text, AgentConfig& config) {
  if (text == nullptr) return "castscope: no configuration given";
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return std::string("castscope: configuration is not valid JSON: ") + e.what();
  }
  try {
    if (!doc.is_object()) return "castscope: configuration must be a JSON object";
    for (const auto& [key, value] : doc.items()) {
      if (key == "policy_files") {
        config.policy_files = value.get<std::vector<std::string>>();
      } else if (key == "events_path") {
        config.events_path = value.is_null() ? "" : value.get<std::string>();
      } else if (key == "record_events") {
        config.record_events = value.get<bool>();
      } else if (key == "ring_records") {
        config.ring_records = value.get<int64_t>() < 0 ? 0 : value.get<size_t>();
      } else if (key == "max_threads") {
        config.max_threads = value.get<int64_t>() < 0 ? 0 : value.get<size_t>();
      } else if (key == "flush_interval_ms") {
        config.flush_interval_ms = value.get<int>();
      } else if (key == "cache_sample_interval_ms") {
        config.cache_sample_interval_ms = value.get<int>();
      } else if (key == "internal_path_prefix") {
        config.internal_path_prefix = value.get<std::string>();
      } else if (key == "torch_version") {
        config.torch_version = value.get<std::string>();
      } else if (key == "collector") {
        config.collector = value.is_null() ? "" : value.get<std::string>();
      } else if (key == "spool_dir") {
        config.spool_dir = value.is_null() ? "" : value.get<std::string>();
      } else if (key == "run_id") {
        config.run_id = value.get<std::string>();
      } else if (key == "command") {
        config.command = value.get<std::string>();
      } else if (key == "forwarder_path") {
        config.forwarder_path = value.get<std::string>();
      } else if (key == "token_env") {
        config.token_env = value.get<std::string>();
      } else if (key == "tls_ca") {
        config.tls_ca = value.get<std::string>();
      } else if (key == "batch_events") {
        config.batch_events = value.get<int64_t>() < 0 ? 0 : value.get<size_t>();
      } else if (key == "spool_max_bytes") {
        config.spool_max_bytes = value.get<int64_t>() < 0 ? 0 : value.get<uint64_t>();
      } else if (key == "probe") {
        config.probe.enabled = value.get<bool>();
      } else if (key == "probe_iterations") {
        config.probe.iterations = value.get<uint64_t>();
      } else if (key == "probe_every_iterations") {
        config.probe.every_iterations = value.get<uint64_t>();
      } else if (key == "probe_max_ms") {
        config.probe.max_ms = value.get<int64_t>();
      } else if (key == "probe_every_ms") {
        config.probe.every_ms = value.get<int64_t>();
      } else if (key == "spool_segment_bytes") {
        config.spool_segment_bytes = value.get<int64_t>() < 0 ? 0 : value.get<uint64_t>();
      } else {
        return "castscope: unknown configuration key \"" + key + "\"";
      }
    }
  } catch (const json::exception& e) {
    return std::string("castscope: bad configuration value: ") + e.what();
  }
  if (config.policy_files.empty()) return "castscope: configuration names no policy_files";
  if (config.ring_records == 0 || config.ring_records > kMaxRingRecords)
    return "castscope: ring_records must be between 1 and " + std::to_string(kMaxRingRecords);
  if (config.max_threads == 0 || config.max_threads > 4096) return "castscope: max_threads must be between 1 and 4096";
  if (config.flush_interval_ms <= 0) return "castscope: flush_interval_ms must be positive";
  if (config.cache_sample_interval_ms <= 0) return "castscope: cache_sample_interval_ms must be positive";
  if (config.batch_events == 0 || config.batch_events > 65536) return "castscope: batch_events must be between 1 and 65536";
  if (config.spool_segment_bytes < 4096) return "castscope: spool_segment_bytes must be at least 4096";
  if (config.spool_max_bytes < config.spool_segment_bytes)
    return "castscope: spool_max_bytes must be at least spool_segment_bytes";
  if (!config.collector.empty() && config.collector.find(':') == std::string::npos)
    return "castscope: collector must be host:port, got \"" + config.collector + "\"";
  if (config.probe.iterations == 0 || config.probe.max_ms <= 0 || config.probe.every_ms < 0)
    return "castscope: probe_iterations and probe_max_ms must be positive, probe_every_ms at least 0";
  if (config.run_id.size() > 256) return "castscope: run_id is longer than 256 characters";
  return "";
}

}  // namespace castscope
