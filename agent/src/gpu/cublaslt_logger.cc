#include "agent/src/gpu/cublaslt_logger.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "agent/src/gpu/cublaslt_trace.h"
#include "agent/src/gpu/gemm_scope.h"

namespace castscope {
namespace {

constexpr int kTraceLevel = 2;            // "Performance Trace": one message per matmul
constexpr int kTraceMask = 1 << (kTraceLevel - 1);

using SetCallbackFn = cublasStatus_t (*)(cublasLtLoggerCallback_t);
using SetMaskFn = cublasStatus_t (*)(int);
using SetFileFn = cublasStatus_t (*)(FILE*);

struct Library {
  void* handle = nullptr;
  SetCallbackFn set_callback = nullptr;
  SetMaskFn set_mask = nullptr;
  SetFileFn set_file = nullptr;
};

std::mutex g_mutex;  // start, stop and the interposed setters
Library g_library;
std::string g_state;
std::atomic<bool> g_active{false};
// What the job asked for through the interposed setters while castscope's
// callback is installed: it keeps getting exactly that.
std::atomic<cublasLtLoggerCallback_t> g_user_callback{nullptr};
std::atomic<int> g_user_mask{0};
FILE* g_devnull = nullptr;  // never closed: cuBLASLt may hold it until exit

std::atomic<uint64_t> g_in_ops{0}, g_outside_ops{0}, g_tf32_outside{0}, g_unread{0};

void on_message(int level, const char* function, const char* message) {
  if (cublasLtLoggerCallback_t user = g_user_callback.load(std::memory_order_acquire);
      user != nullptr && level >= 1 && (g_user_mask.load(std::memory_order_relaxed) & (1 << (level - 1))) != 0)
    user(level, function, message);
  if (level != kTraceLevel || function == nullptr || message == nullptr) return;
  const std::string_view name(function);
  if (!name.starts_with("cublasLt") || !name.ends_with("Matmul")) return;
  MatmulTrace trace;
  if (!parse_matmul_trace(name, message, trace)) {
    g_unread.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (note_gemm(trace.compute, trace.a, trace.b, trace.d)) {
    g_in_ops.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_outside_ops.fetch_add(1, std::memory_order_relaxed);
    if (trace.compute == GemmCompute::k32FFastTF32) g_tf32_outside.fetch_add(1, std::memory_order_relaxed);
  }
}

const char* job_logging_variable() {
  for (const char* name : {"CUBLASLT_LOG_LEVEL", "CUBLASLT_LOG_MASK", "CUBLASLT_LOG_FILE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0' && std::string_view(value) != "0") return name;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> cublaslt_candidates(const std::string& configured, const std::string& torch_dir) {
  if (!configured.empty()) return {configured};
  std::vector<std::string> out;
  std::string torch = torch_dir;
  while (torch.size() > 1 && torch.back() == '/') torch.pop_back();
  if (!torch.empty() && torch.find('/') != std::string::npos)
    out.push_back(torch.substr(0, torch.find_last_of('/')) + "/nvidia/cu13/lib/libcublasLt.so.13");
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) out.push_back(name);
  return out;
}

std::string cublaslt_logger_start(const std::vector<std::string>& candidates) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_active.load()) return g_state;
  if (const char* variable = job_logging_variable()) {
    g_state = std::string("off: the job logs cuBLASLt itself (") + variable + " is set); castscope leaves its logger alone";
    return g_state;
  }
  Library library;
  for (const std::string& path : candidates) {
    library.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (library.handle != nullptr) break;
  }
  if (library.handle == nullptr) {
    std::string tried;
    for (const std::string& path : candidates) tried += (tried.empty() ? "" : ", ") + path;
    g_state = "off: no cuBLASLt is loaded in this process (torch loads it with CUDA; looked for " + tried + ")";
    return g_state;
  }
  library.set_callback = reinterpret_cast<SetCallbackFn>(dlsym(library.handle, "cublasLtLoggerSetCallback"));
  library.set_mask = reinterpret_cast<SetMaskFn>(dlsym(library.handle, "cublasLtLoggerSetMask"));
  library.set_file = reinterpret_cast<SetFileFn>(dlsym(library.handle, "cublasLtLoggerSetFile"));
  if (library.set_callback == nullptr || library.set_mask == nullptr || library.set_file == nullptr) {
    dlclose(library.handle);
    g_state = "off: the loaded cuBLASLt has no logger API (cublasLtLoggerSetCallback/SetMask/SetFile)";
    return g_state;
  }
  if (g_devnull == nullptr) g_devnull = std::fopen("/dev/null", "w");
  cublasStatus_t status = g_devnull != nullptr ? library.set_file(g_devnull) : CUBLAS_STATUS_NOT_INITIALIZED;
  if (status == CUBLAS_STATUS_SUCCESS) status = library.set_callback(&on_message);
  if (status == CUBLAS_STATUS_SUCCESS) status = library.set_mask(kTraceMask | g_user_mask.load());
  if (status != CUBLAS_STATUS_SUCCESS) {
    library.set_callback(nullptr);
    library.set_mask(0);
    dlclose(library.handle);
    g_state = "off: cuBLASLt refused its logger settings (status " + std::to_string(static_cast<int>(status)) + ")";
    return g_state;
  }
  g_library = library;
  gpu_detail::g_gemm_logging.store(true, std::memory_order_release);
  g_active.store(true);
  g_state = "on";
  return g_state;
}

void cublaslt_logger_stop() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_active.load()) return;
  gpu_detail::g_gemm_logging.store(false, std::memory_order_release);
  // Hand the logger back as the job last set it through castscope.
  g_library.set_mask(g_user_mask.load());
  g_library.set_callback(g_user_callback.load());
  dlclose(g_library.handle);  // RTLD_NOLOAD took a reference; torch holds its own
  g_library = Library{};
  g_active.store(false);
  g_state = "off: stopped";
}

std::string cublaslt_logger_state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_state;
}

CublasLtLoggerStats cublaslt_logger_stats() {
  return {g_in_ops.load(), g_outside_ops.load(), g_tf32_outside.load(), g_unread.load()};
}

}  // namespace castscope

// The job's own calls to the logger setters, when they resolve against
// castscope's library: while castscope's callback is installed they are
// remembered and honoured through it; otherwise they go to cuBLASLt as if
// castscope were not there.
namespace {

template <typename Fn>
Fn next_setter(const char* name) {
  if (castscope::g_library.handle != nullptr) return reinterpret_cast<Fn>(dlsym(castscope::g_library.handle, name));
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t callback) {
  using namespace castscope;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_active.load()) {
    g_user_callback.store(callback, std::memory_order_release);
    return CUBLAS_STATUS_SUCCESS;
  }
  auto next = next_setter<SetCallbackFn>("cublasLtLoggerSetCallback");
  return next != nullptr ? next(callback) : CUBLAS_STATUS_NOT_INITIALIZED;
}

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetMask(int mask) {
  using namespace castscope;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_active.load()) {
    g_user_mask.store(mask);
    return g_library.set_mask(mask | kTraceMask);
  }
  auto next = next_setter<SetMaskFn>("cublasLtLoggerSetMask");
  return next != nullptr ? next(mask) : CUBLAS_STATUS_NOT_INITIALIZED;
}

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetLevel(int level) {
  using namespace castscope;
  if (level < 0 || level > 5) return CUBLAS_STATUS_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_active.load()) {
    // Level n logs every kind up to n, as a mask.
    const int mask = (1 << level) - 1;
    g_user_mask.store(mask);
    return g_library.set_mask(mask | kTraceMask);
  }
  auto next = next_setter<SetMaskFn>("cublasLtLoggerSetLevel");
  return next != nullptr ? next(level) : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
