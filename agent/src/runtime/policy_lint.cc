// libcastscope_policy_lint.so: policy files read and checked without torch
// (agent/include/castscope/policy_lint.h).
#include "castscope/policy_lint.h"

#include <torch/version.h>  // TORCH_VERSION only: this library does not link libtorch

#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/src/policy/callables_json.h"
#include "agent/src/policy/policy.h"
#include "agent/src/runtime/copy_out.h"

namespace {

using castscope::copy_out;
using nlohmann::json;

// The request's file list, or an error that says what is wrong with it.
std::string policy_files_of(const char* request_json, std::vector<std::string>& files) {
  if (request_json == nullptr) return "castscope policy lint: no request";
  const json request = json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("policy_files") || !request["policy_files"].is_array())
    return "castscope policy lint: the request must be an object with a \"policy_files\" array";
  for (const auto& file : request["policy_files"]) {
    if (!file.is_string()) return "castscope policy lint: \"policy_files\" holds a value that is not a string";
    files.push_back(file.get<std::string>());
  }
  if (files.empty()) return "castscope policy lint: \"policy_files\" is empty";
  return "";
}

}  // namespace

extern "C" {

size_t castscope_policy_lint(const char* request_json, char* buf, size_t len) {
  json out = {{"ok", false}, {"errors", json::array()}};
  try {
    std::vector<std::string> files;
    const std::string error = policy_files_of(request_json, files);
    if (!error.empty()) {
      out["errors"].push_back(error);
    } else {
      const castscope::PolicySet policies = castscope::load_policy_files(files);
      castscope::describe_policy_set(policies, out);
      out["ok"] = policies.ok();
    }
  } catch (const std::exception& e) {
    out["errors"].push_back(std::string("castscope policy lint: internal error: ") + e.what());
  }
  // Replace, not throw: paths and messages may hold bytes that are not UTF-8.
  return copy_out(out.dump(-1, ' ', false, json::error_handler_t::replace), buf, len);
}

const char* castscope_policy_lint_torch_version(void) { return TORCH_VERSION; }

}  // extern "C"
