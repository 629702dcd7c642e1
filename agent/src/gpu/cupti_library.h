// CUPTI, loaded at run time with dlopen: never a link-time dependency, so the
// agent loads on machines with no CUDA at all and says why GPU timing is off.
//
// Only the entry points castscope calls are resolved. Their types come from
// the CUPTI headers of the nvidia wheel (or the toolkit), which the agent
// compiles against; the library found at run time may be newer.
#pragma once

#include <cupti.h>

#include <string>
#include <vector>

namespace castscope {

struct CuptiLibrary {
  void* handle = nullptr;
  std::string path;  // the file that was loaded

  CUptiResult (*activity_enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*activity_flush_all)(uint32_t) = nullptr;
  CUptiResult (*activity_get_next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*activity_get_num_dropped_records)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*activity_push_external_correlation_id)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
  CUptiResult (*activity_pop_external_correlation_id)(CUpti_ExternalCorrelationKind, uint64_t*) = nullptr;
  CUptiResult (*get_timestamp)(uint64_t*) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  // CUPTI 12.x+: also names the subscriber that holds CUPTI. May be absent.
  CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*, CUpti_SubscriberParams*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;

  bool loaded() const { return handle != nullptr; }
  // "CUPTI_ERROR_..." text of a result, or its number when the library has none.
  std::string describe(CUptiResult result) const;
};

// Where castscope looks for libcupti when no path is configured, in order:
// the torch wheel's nvidia/cu13/lib (beside `torch_dir`), then the dynamic
// loader's search path, then the CUDA toolkit's usual folders.
std::vector<std::string> cupti_candidates(const std::string& torch_dir);

// Loads the first candidate that opens and has every required entry point.
// On failure returns false and `error` says what was tried and why each failed.
bool load_cupti(const std::vector<std::string>& candidates, CuptiLibrary& library, std::string& error);

}  // namespace castscope
