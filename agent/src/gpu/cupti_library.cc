#include "agent/src/gpu/cupti_library.h"

#include <dlfcn.h>

namespace castscope {

std::string CuptiLibrary::describe(CUptiResult result) const {
  const char* text = nullptr;
  if (get_result_string != nullptr && get_result_string(result, &text) == CUPTI_SUCCESS && text != nullptr) return text;
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

std::vector<std::string> cupti_candidates(const std::string& torch_dir) {
  // The copy torch itself loaded comes first (load_cupti tries every
  // candidate with RTLD_NOLOAD before opening any): one CUPTI per process.
  std::vector<std::string> out;
  std::string torch = torch_dir;
  while (torch.size() > 1 && torch.back() == '/') torch.pop_back();  // "…/torch/" from the Python package
  if (!torch.empty() && torch.find('/') != std::string::npos) {
    const std::string site = torch.substr(0, torch.find_last_of('/'));
    out.push_back(site + "/nvidia/cu13/lib/libcupti.so.13");
    out.push_back(site + "/nvidia/cuda_cupti/lib/libcupti.so.12");
  }
  out.push_back("libcupti.so.13");
  out.push_back("libcupti.so.12");
  out.push_back("libcupti.so");
  out.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so");
  out.push_back("/usr/local/cuda/lib64/libcupti.so");
  return out;
}

namespace {

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& missing) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return out != nullptr;
}

}  // namespace

bool load_cupti(const std::vector<std::string>& candidates, CuptiLibrary& library, std::string& error) {
  error.clear();
  // A CUPTI already in the process (torch's, beside Kineto) is the one to use.
  std::vector<std::string> order;
  for (const std::string& path : candidates) {
    if (void* loaded = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL); loaded != nullptr) {
      dlclose(loaded);
      order.insert(order.begin(), path);
    } else {
      order.push_back(path);
    }
  }
  for (const std::string& path : order) {
    // RTLD_LOCAL: CUPTI's symbols stay out of the global namespace, where a
    // profiler loaded later would resolve to them.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      error += "\n  " + path + ": " + (why != nullptr ? why : "cannot be opened");
      continue;
    }
    CuptiLibrary lib;
    lib.handle = handle;
    lib.path = path;
    std::string missing;
    resolve(handle, "cuptiActivityEnable", lib.activity_enable, missing);
    resolve(handle, "cuptiActivityDisable", lib.activity_disable, missing);
    resolve(handle, "cuptiActivityRegisterCallbacks", lib.activity_register_callbacks, missing);
    resolve(handle, "cuptiActivityFlushAll", lib.activity_flush_all, missing);
    resolve(handle, "cuptiActivityGetNextRecord", lib.activity_get_next_record, missing);
    resolve(handle, "cuptiActivityGetNumDroppedRecords", lib.activity_get_num_dropped_records, missing);
    resolve(handle, "cuptiActivityPushExternalCorrelationId", lib.activity_push_external_correlation_id, missing);
    resolve(handle, "cuptiActivityPopExternalCorrelationId", lib.activity_pop_external_correlation_id, missing);
    resolve(handle, "cuptiGetTimestamp", lib.get_timestamp, missing);
    resolve(handle, "cuptiGetResultString", lib.get_result_string, missing);
    resolve(handle, "cuptiSubscribe", lib.subscribe, missing);
    resolve(handle, "cuptiUnsubscribe", lib.unsubscribe, missing);
    lib.subscribe_v2 = reinterpret_cast<decltype(lib.subscribe_v2)>(dlsym(handle, "cuptiSubscribe_v2"));  // optional
    if (!missing.empty()) {
      error += "\n  " + path + ": lacks " + missing;
      dlclose(handle);
      continue;
    }
    library = lib;
    return true;
  }
  error = "no usable CUPTI library:" + error;
  return false;
}

}  // namespace castscope
