#include "server/src/report/precision_map.h"

#include <map>
#include <set>
#include <string>

#include "server/src/analysis/analyzers.h"

namespace castscope::collector {

namespace {

using nlohmann::json;

// A module's row and its parameters' folded into one (the module's totals).
struct Folded {
  std::set<v1::DType> stored, computed, communicated, cast_to;
  std::map<std::string, uint64_t> bytes_by_maker;
  uint64_t conversions = 0;

  void add(const PrecisionRow& row) {
    stored.insert(row.stored.begin(), row.stored.end());
    computed.insert(row.computed.begin(), row.computed.end());
    communicated.insert(row.communicated.begin(), row.communicated.end());
    cast_to.insert(row.cast_to.begin(), row.cast_to.end());
    for (const auto& [maker, bytes] : row.bytes_by_maker) bytes_by_maker[maker] += bytes;
    conversions += row.conversions;
  }
};

json dtypes_json(const std::set<v1::DType>& dtypes) {
  json out = json::array();
  for (v1::DType dtype : dtypes) out.push_back(dtype_name(dtype));
  return out;
}

void describe(const Folded& f, uint64_t steps, json& out) {
  out["stored"] = dtypes_json(f.stored);
  out["computed"] = dtypes_json(f.computed);
  out["communicated"] = dtypes_json(f.communicated);
  out["cast_to"] = dtypes_json(f.cast_to);
  out["conversions"] = f.conversions;
  json bytes = json::object(), per_step = json::object();
  for (const auto& [maker, n] : f.bytes_by_maker) {
    bytes[maker] = n;
    per_step[maker] = steps > 0 ? n / steps : 0;
  }
  out["bytes_by_maker"] = bytes;
  out["bytes_per_step_by_maker"] = steps > 0 ? per_step : json(nullptr);
}

}  // namespace

json precision_map_json(const RunData& run) {
  json modules = json::array();
  // run.precision_map is sorted by module, its own row first: one entry per module.
  for (size_t i = 0; i < run.precision_map.size();) {
    const std::string& name = run.precision_map[i].module;
    Folded total;
    json parameters = json::array();
    for (; i < run.precision_map.size() && run.precision_map[i].module == name; ++i) {
      const PrecisionRow& row = run.precision_map[i];
      total.add(row);
      if (row.parameter.empty()) continue;
      Folded own;
      own.add(row);
      json parameter = {{"name", row.parameter}};
      describe(own, run.optimizer_steps, parameter);
      parameters.push_back(std::move(parameter));
    }
    json module = {{"module", name}};
    describe(total, run.optimizer_steps, module);
    module["parameters"] = std::move(parameters);
    modules.push_back(std::move(module));
  }
  json out = {{"available", !run.aggregate},
              {"optimizer_steps", run.optimizer_steps},
              {"modules", std::move(modules)}};
  if (run.aggregate) out["why"] = "aggregate mode's counters carry no module: attach in events mode for the precision map";
  return out;
}

}  // namespace castscope::collector
