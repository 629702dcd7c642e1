#include "agent/src/config/agent_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <ostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/src/record/event_log.h"

namespace castscope {
namespace {

using json = nlohmann::json;

std::string parse(const std::string& text, AgentConfig& config) { return parse_agent_config(text.c_str(), config); }

std::string parse(const json& doc) {
  AgentConfig config;
  return parse_agent_config(doc.dump().c_str(), config);
}

}  // namespace

// A schedule as its keys' values, in a failed expectation.
void PrintTo(const WindowScheduleConfig& s, std::ostream* out) {
  *out << "{steps " << s.steps << ", every_steps " << s.every_steps << ", max_ms " << s.max_ms << ", every_ms "
       << s.every_ms << "}";
}

namespace {

json minimal() { return {{"policy_files", {"policies/cpu.json"}}}; }

json with(const std::string& key, const json& value) {
  json doc = minimal();
  doc[key] = value;
  return doc;
}

// The error starts with "castscope: " and holds every one of `parts`.
void expect_refused(const json& doc, const std::vector<std::string>& parts) {
  const std::string error = parse(doc);
  ASSERT_FALSE(error.empty()) << doc.dump() << " was accepted";
  EXPECT_TRUE(error.starts_with("castscope: ")) << error;
  for (const auto& part : parts) EXPECT_NE(error.find(part), std::string::npos) << error << " lacks " << part;
}

TEST(AgentConfigTest, MinimalConfigKeepsTheDefaults) {
  AgentConfig config;
  ASSERT_EQ(parse(R"({"policy_files": ["a.json", "b.json"]})", config), "");
  EXPECT_EQ(config.policy_files, (std::vector<std::string>{"a.json", "b.json"}));
  const AgentConfig defaults;
  EXPECT_EQ(config.record_events, defaults.record_events);
  EXPECT_EQ(config.ring_records, defaults.ring_records);
  EXPECT_EQ(config.max_threads, defaults.max_threads);
  EXPECT_EQ(config.token_env, "CASTSCOPE_TOKEN");
  EXPECT_EQ(config.spool_max_bytes, uint64_t{1} << 30);
  EXPECT_TRUE(config.probe.enabled);
  EXPECT_EQ(config.probe.schedule.steps, 2u);
}

TEST(AgentConfigTest, EveryKeyIsRead) {
  AgentConfig config;
  const json doc = {{"policy_files", {"p.json"}},
                    {"events_path", "ev-{pid}.jsonl"},
                    {"record_events", false},
                    {"explicit_casts", false},
                    {"module_scopes", false},
                    {"aggregate", true},
                    {"aggregate_max_keys", 64},
                    {"ring_records", 1024},
                    {"max_threads", 8},
                    {"flush_interval_ms", 20},
                    {"cache_sample_interval_ms", 500},
                    {"cache_sample_every_misses", 16},
                    {"torch_version", "2.14.1"},
                    {"internal_path_prefix", "/venv/torch/"},
                    {"collector", "127.0.0.1:7070"},
                    {"spool_dir", "/tmp/spool"},
                    {"run_id", "run-1"},
                    {"command", "python train.py"},
                    {"forwarder_path", "/opt/castscope-forwarder"},
                    {"token_env", "MY_TOKEN"},
                    {"tls_ca", "ca.pem"},
                    {"give_up_after_s", 5},
                    {"batch_events", 100},
                    {"spool_max_bytes", 1 << 20},
                    {"spool_segment_bytes", 1 << 16},
                    {"spool_backlog_bytes", 1 << 18},
                    {"probe", false},
                    {"probe_steps", 3},
                    {"probe_every_steps", 0},
                    {"probe_max_ms", 100},
                    {"probe_every_ms", 0},
                    {"numerics", false},
                    {"numerics_steps", 4},
                    {"numerics_every_steps", 0},
                    {"numerics_max_ms", 200},
                    {"numerics_every_ms", 0},
                    {"numerics_skip_capture_steps", 7},
                    {"gpu_timing", "on"},
                    {"cupti_library", "/opt/cuda/libcupti.so"},
                    {"gpu_correlation_kind", "CUSTOM1"},
                    {"gpu_buffer_bytes", 8192},
                    {"gpu_buffer_budget_bytes", 16384},
                    {"gpu_correlate", "all_ops"},
                    {"gpu_steps", 3},
                    {"gpu_every_steps", 50},
                    {"gpu_max_ms", 1000},
                    {"gpu_every_ms", 0},
                    {"cublaslt_logger", true},
                    {"cublaslt_library", "/venv/nvidia/cu13/lib/libcublasLt.so.13"}};
  ASSERT_EQ(parse(doc.dump(), config), "");
  EXPECT_EQ(config.gpu.mode, GpuTimingConfig::Mode::kOn);
  EXPECT_EQ(config.gpu.cupti_library, "/opt/cuda/libcupti.so");
  EXPECT_EQ(config.gpu.correlation_kind, 4u);
  EXPECT_EQ(config.gpu.buffer_bytes, 8192u);
  EXPECT_EQ(config.gpu.buffer_budget_bytes, 16384u);
  EXPECT_TRUE(config.gpu.correlate_all_ops);
  EXPECT_EQ(config.gpu.schedule,
            (WindowScheduleConfig{.steps = 3u, .every_steps = 50u, .max_ms = 1000, .every_ms = 0}));
  EXPECT_TRUE(config.gpu.cublaslt_logger);
  EXPECT_EQ(config.gpu.cublaslt_library, "/venv/nvidia/cu13/lib/libcublasLt.so.13");
  EXPECT_EQ(config.events_path, "ev-{pid}.jsonl");
  EXPECT_FALSE(config.record_events);
  EXPECT_FALSE(config.explicit_casts);
  EXPECT_FALSE(config.module_scopes);
  EXPECT_TRUE(config.aggregate);
  EXPECT_EQ(config.aggregate_max_keys, 64u);
  EXPECT_EQ(config.ring_records, 1024u);
  EXPECT_EQ(config.max_threads, 8u);
  EXPECT_EQ(config.flush_interval_ms, 20);
  EXPECT_EQ(config.cache_sample_interval_ms, 500);
  EXPECT_EQ(config.cache_sample_every_misses, 16);
  EXPECT_EQ(config.torch_version, "2.14.1");
  EXPECT_EQ(config.internal_path_prefix, "/venv/torch/");
  EXPECT_EQ(config.collector, "127.0.0.1:7070");
  EXPECT_EQ(config.spool_dir, "/tmp/spool");
  EXPECT_EQ(config.run_id, "run-1");
  EXPECT_EQ(config.command, "python train.py");
  EXPECT_EQ(config.forwarder_path, "/opt/castscope-forwarder");
  EXPECT_EQ(config.token_env, "MY_TOKEN");
  EXPECT_EQ(config.tls_ca, "ca.pem");
  EXPECT_EQ(config.give_up_after_s, 5);
  EXPECT_EQ(config.batch_events, 100u);
  EXPECT_EQ(config.spool_max_bytes, 1u << 20);
  EXPECT_EQ(config.spool_segment_bytes, 1u << 16);
  EXPECT_EQ(config.spool_backlog_bytes, 1u << 18);
  EXPECT_FALSE(config.probe.enabled);
  EXPECT_EQ(config.probe.schedule,
            (WindowScheduleConfig{.steps = 3u, .every_steps = 0u, .max_ms = 100, .every_ms = 0}));
  EXPECT_FALSE(config.numerics.enabled);
  EXPECT_EQ(config.numerics.schedule,
            (WindowScheduleConfig{.steps = 4u, .every_steps = 0u, .max_ms = 200, .every_ms = 0}));
  EXPECT_EQ(config.numerics.skip_capture_steps, 7u);
  EXPECT_EQ(agent_config_keys().size(), doc.size() + 7);  // and the 7 old names of schedule keys
}

// The schedule keys' old names (before the three schedules took one naming)
// still read as the new ones; both at once are refused.
TEST(AgentConfig, OldScheduleKeyNamesReadAsTheNewOnes) {
  const json old_names = {{"policy_files", {"a.json"}},        {"probe_iterations", 3},
                          {"probe_every_iterations", 7},        {"numerics_iterations", 4},
                          {"numerics_every_iterations", 9},     {"numerics_skip_capture_iterations", 5},
                          {"gpu_window_steps", 6},              {"gpu_window_max_ms", 1000}};
  const json new_names = {{"policy_files", {"a.json"}},   {"probe_steps", 3},          {"probe_every_steps", 7},
                          {"numerics_steps", 4},          {"numerics_every_steps", 9}, {"numerics_skip_capture_steps", 5},
                          {"gpu_steps", 6},               {"gpu_max_ms", 1000}};
  AgentConfig from_old, from_new;
  ASSERT_EQ(parse(old_names.dump(), from_old), "");
  ASSERT_EQ(parse(new_names.dump(), from_new), "");
  EXPECT_EQ(from_old, from_new);
  EXPECT_EQ(from_new.probe.schedule.every_steps, 7u);
  EXPECT_EQ(from_new.gpu.schedule.max_ms, 1000);
  json both = with("probe_iterations", 2);
  both["probe_steps"] = 2;
  expect_refused(both, {"give probe_steps or its old name probe_iterations, not both"});
}

TEST(AgentConfigTest, NullMeansNotSetWhereAllowed) {
  AgentConfig config;
  ASSERT_EQ(parse(R"({"policy_files": ["p.json"], "events_path": null, "collector": null, "spool_dir": null})", config),
            "");
  EXPECT_EQ(config.events_path, "");
  EXPECT_EQ(config.collector, "");
  expect_refused(with("run_id", nullptr), {"\"run_id\"", "expected a string", "null"});
}

TEST(AgentConfigTest, NotAnObjectOrNotJsonIsRefused) {
  AgentConfig config;
  EXPECT_EQ(parse_agent_config(nullptr, config), "castscope: no configuration given");
  EXPECT_TRUE(parse("{\"policy_files\": [", config).starts_with("castscope: configuration is not valid JSON"));
  EXPECT_EQ(parse("[1]", config), "castscope: configuration must be a JSON object");
  EXPECT_EQ(parse("{}", config), "castscope: configuration names no policy_files");
  expect_refused(with("policy_files", json::array()), {"names no policy_files"});
}

TEST(AgentConfigTest, UnknownKeyIsRefusedByName) {
  EXPECT_EQ(parse(with("ring_record", 1024)), "castscope: unknown configuration key \"ring_record\"");
}

TEST(AgentConfigTest, WrongTypesNameTheKeyAndWhatWasExpected) {
  expect_refused(with("ring_records", "big"), {"\"ring_records\"", "expected an integer", "\"big\""});
  expect_refused(with("ring_records", 1.5), {"\"ring_records\"", "expected an integer", "1.5"});
  expect_refused(with("ring_records", true), {"\"ring_records\"", "expected an integer", "true"});
  expect_refused(with("record_events", 1), {"\"record_events\"", "true or false"});
  expect_refused(with("probe", "yes"), {"\"probe\"", "true or false"});
  expect_refused(with("policy_files", "p.json"), {"\"policy_files\"", "array"});
  expect_refused(with("policy_files", {1, 2}), {"\"policy_files\"", "strings"});
  expect_refused(with("collector", 7070), {"\"collector\"", "a string or null"});
  expect_refused(with("token_env", json::array()), {"\"token_env\"", "expected a string"});
}

TEST(AgentConfigTest, ALongNonAsciiValueGivesAMessageThatIsValidUtf8) {
  // The message quotes the value cut to 60 bytes; it must not split a
  // character (the message is dumped as JSON again by castscope_policy_check).
  const std::string error = parse(with("ring_records", std::string(55, 'a') + "\u00e9\u00e9\u00e9\u00e9"));
  EXPECT_NE(error.find("ring_records"), std::string::npos);
  EXPECT_NO_THROW((void)json(error).dump());
}

TEST(AgentConfigTest, ValuesOutOfRangeAreRefused) {
  expect_refused(with("ring_records", 0), {"ring_records must be between 1 and"});
  expect_refused(with("ring_records", -1), {"ring_records must be between 1 and", "-1"});
  expect_refused(with("aggregate_max_keys", 15), {"aggregate_max_keys must be between 16 and"});
  expect_refused(with("aggregate", 1), {"aggregate"});
  expect_refused(with("ring_records", kMaxRingRecords + 1), {"ring_records must be between 1 and"});
  expect_refused(with("max_threads", 4097), {"max_threads must be between 1 and 4096"});
  expect_refused(with("flush_interval_ms", 0), {"flush_interval_ms must be positive"});
  expect_refused(with("flush_interval_ms", int64_t{1} << 31), {"flush_interval_ms must be positive"});
  expect_refused(with("cache_sample_interval_ms", -5), {"cache_sample_interval_ms must be positive"});
  expect_refused(with("cache_sample_every_misses", -1), {"cache_sample_every_misses must be between 0 (off) and"});
  expect_refused(with("batch_events", 65537), {"batch_events must be between 1 and 65536"});
  expect_refused(with("spool_segment_bytes", 100), {"spool_segment_bytes must be at least 4096"});
  expect_refused(with("spool_max_bytes", 1 << 20), {"spool_max_bytes must be at least spool_segment_bytes"});
  expect_refused(with("probe_steps", 0), {"probe_steps must be positive"});
  expect_refused(with("probe_max_ms", 0), {"probe_max_ms must be positive"});
  expect_refused(with("probe_every_ms", -1), {"probe_every_ms must be at least 0"});
  expect_refused(with("probe_every_steps", -1), {"probe_every_steps must be at least 0"});
  expect_refused(with("collector", "localhost"), {"collector \"localhost\"", "expected HOST:PORT"});
  expect_refused(with("collector", "localhost:99999"), {"the port must be a number from 1 to 65535"});
  expect_refused(with("collector", "127.0.0.1:"), {"the port must be a number from 1 to 65535"});
  expect_refused(with("collector", "bad:port:x"), {"expected HOST:PORT"});
  EXPECT_EQ(parse(with("collector", "[::1]:7070")), "");
  EXPECT_EQ(parse(with("collector", "unix:/tmp/collector.sock")), "");
  expect_refused(with("run_id", std::string(257, 'r')), {"run_id is longer than 256 characters"});
  EXPECT_EQ(parse(with("run_id", std::string(256, 'r'))), "");
  EXPECT_EQ(parse(with("collector", "")), "");
}

// Deep or huge text is refused before it is parsed, saying why.
TEST(AgentConfigTest, DeepOrHugeTextIsRefusedUnparsed) {
  AgentConfig config;
  const std::string deep = R"({"policy_files": ["p.json"], "x": )" + std::string(100000, '[') + "1" +
                           std::string(100000, ']') + "}";
  EXPECT_EQ(parse_agent_config(deep.c_str(), config),
            "castscope: configuration line 1: nested deeper than 8 levels of arrays and objects; castscope stops "
            "reading there");
  const std::string huge = R"({"policy_files": ["p.json"], "run_id": ")" + std::string(2 << 20, 'r') + "\"}";
  EXPECT_NE(parse_agent_config(huge.c_str(), config).find("castscope reads at most 1048576"), std::string::npos);
}

// docs/schema/agent-config.schema.json says what this parser does: the same
// keys, and for each integer key the same bounds.
TEST(AgentConfigTest, GpuKeysRefuseWhatTheyDoNotKnow) {
  EXPECT_NE(parse(with("gpu_timing", "maybe")).find("gpu_timing"), std::string::npos);
  EXPECT_NE(parse(with("gpu_correlation_kind", "CUSTOM3")).find("Kineto"), std::string::npos);
  EXPECT_NE(parse(with("gpu_correlate", true)).find("gpu_correlate"), std::string::npos);
  EXPECT_NE(parse(with("cupti_library", 3)).find("cupti_library"), std::string::npos);
  json doc = with("gpu_buffer_bytes", 1 << 20);
  doc["gpu_buffer_budget_bytes"] = 1 << 19;
  EXPECT_EQ(parse(doc), "castscope: gpu_buffer_budget_bytes must be at least gpu_buffer_bytes");
}

json agent_config_schema() {
  std::ifstream in(std::string(CASTSCOPE_SOURCE_DIR) + "/docs/schema/agent-config.schema.json");
  EXPECT_TRUE(in) << "docs/schema/agent-config.schema.json";
  return in ? json::parse(in) : json::object();
}

TEST(AgentConfigTest, SchemaMatchesTheParser) {
  const json schema = agent_config_schema();
  EXPECT_EQ(schema["additionalProperties"], false);
  EXPECT_EQ(schema["required"], json::array({"policy_files"}));
  std::vector<std::string> schema_keys;
  for (const auto& [key, property] : schema["properties"].items()) schema_keys.push_back(key);
  std::vector<std::string> parser_keys = agent_config_keys();
  std::sort(parser_keys.begin(), parser_keys.end());
  EXPECT_EQ(schema_keys, parser_keys);

  for (const auto& [key, property] : schema["properties"].items()) {
    if (property["type"] != "integer") continue;
    // The spool sizes and the GPU buffer sizes are also checked against each other: move both.
    const auto doc_with = [&key = key](const json& value) {
      json doc = with(key, value);
      if (key == "spool_max_bytes" || key == "spool_segment_bytes") {
        doc["spool_max_bytes"] = value;
        doc["spool_segment_bytes"] = value;
      }
      if (key == "gpu_buffer_bytes" || key == "gpu_buffer_budget_bytes") {
        doc["gpu_buffer_bytes"] = value;
        doc["gpu_buffer_budget_bytes"] = value;
      }
      return doc;
    };
    const uint64_t minimum = property["minimum"].get<uint64_t>();
    const uint64_t maximum = property["maximum"].get<uint64_t>();
    EXPECT_EQ(parse(doc_with(minimum)), "") << key << " = minimum " << minimum;
    EXPECT_EQ(parse(doc_with(maximum)), "") << key << " = maximum " << maximum;
    if (minimum > 0) {
      EXPECT_NE(parse(doc_with(minimum - 1)), "") << key << " below the minimum";
    }
    EXPECT_NE(parse(doc_with(-1)), "") << key << " = -1";
    if (maximum < UINT64_MAX) {
      EXPECT_NE(parse(doc_with(maximum + 1)), "") << key << " above the maximum";
    }
    EXPECT_NE(parse(doc_with(1.0)), "") << key << " as a float";
    if (property.contains("default")) {
      EXPECT_EQ(parse(doc_with(property["default"])), "") << key << " = default";
    }
  }
}

// The schema declares each key; the parser's table must take what it says:
// the JSON types (null where allowed), the names of a name, and the default
// (a key set to its default leaves the configuration as the parser's own).
TEST(AgentConfigTest, SchemaTypesNamesAndDefaultsMatchTheParser) {
  const json schema = agent_config_schema();
  AgentConfig defaults;
  ASSERT_EQ(parse(minimal().dump(), defaults), "");
  for (const auto& [key, property] : schema["properties"].items()) {
    if (key == "policy_files") continue;  // required: checked in SchemaMatchesTheParser
    const json types = property["type"].is_array() ? property["type"] : json::array({property["type"]});
    const auto has = [&types](const char* type) { return std::find(types.begin(), types.end(), type) != types.end(); };
    EXPECT_EQ(parse(with(key, nullptr)).empty(), has("null")) << key << " = null";
    EXPECT_EQ(parse(with(key, true)).empty(), has("boolean")) << key << " = true";
    if (has("boolean")) {
      EXPECT_EQ(parse(with(key, false)), "") << key << " = false";
    }
    if (!has("integer")) {
      EXPECT_NE(parse(with(key, 1)), "") << key << " = 1";
    }
    if (property.contains("enum")) {
      for (const json& name : property["enum"]) EXPECT_EQ(parse(with(key, name)), "") << key << " = " << name;
      EXPECT_NE(parse(with(key, "no-such-name")), "") << key << " = no-such-name";
    } else if (!property.contains("pattern")) {
      EXPECT_EQ(parse(with(key, "text")).empty(), has("string")) << key << " = \"text\"";
    }
    if (property.contains("default")) {
      AgentConfig config;
      ASSERT_EQ(parse(with(key, property["default"]).dump(), config), "") << key;
      EXPECT_TRUE(config == defaults) << key << ": the schema's default " << property["default"]
                                      << " is not the parser's";
    }
  }
}

}  // namespace
}  // namespace castscope
