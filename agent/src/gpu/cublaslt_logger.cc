#include "agent/src/gpu/cublaslt_logger.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "agent/src/gpu/cublaslt_trace.h"
#include "agent/src/gpu/gemm_scope.h"

namespace castscope {
namespace {

constexpr int kTraceLevel = 2;  // "Performance Trace": one message per matmul
constexpr int kTraceMask = 1 << (kTraceLevel - 1);

using SetCallbackFn = cublasStatus_t (*)(cublasLtLoggerCallback_t);
using SetIntFn = cublasStatus_t (*)(int);
using SetFileFn = cublasStatus_t (*)(FILE*);
using OpenFileFn = cublasStatus_t (*)(const char*);

struct Library {
  void* handle = nullptr;
  SetCallbackFn set_callback = nullptr;
  SetIntFn set_mask = nullptr;
  SetFileFn set_file = nullptr;
};

// start, stop and the interposed setters. Never held while cuBLASLt calls
// castscope's callback (on_message takes no lock).
std::mutex g_mutex;
Library g_library;
std::string g_state;
std::atomic<bool> g_active{false};

// What the job set through castscope's interposers (the setters below),
// whether castscope was on or not: honoured through castscope's callback
// while it is on, handed back when it stops.
std::atomic<cublasLtLoggerCallback_t> g_job_callback{nullptr};
std::atomic<int> g_job_mask{0};
std::atomic<FILE*> g_job_file{nullptr};  // nullptr: cuBLASLt's default, stdout
FILE* g_devnull = nullptr;               // never closed: cuBLASLt may hold it until exit

// Set while castscope itself calls into cuBLASLt: a setter cuBLASLt calls
// through its own exported names then goes straight to the library.
thread_local bool t_inside_castscope = false;
struct InsideCastscope {
  InsideCastscope() { t_inside_castscope = true; }
  ~InsideCastscope() { t_inside_castscope = false; }
};

std::atomic<uint64_t> g_in_ops{0}, g_outside_ops{0}, g_tf32_outside{0}, g_unread{0};

const char* level_name(int level) {
  static const char* kNames[] = {"Off", "Error", "Trace", "Hints", "Info", "Api"};
  return level >= 0 && level <= 5 ? kNames[level] : "?";
}

// The messages the job asked for, where it asked: its callback, and its file
// (or stdout) in cuBLASLt's own line format, since castscope keeps cuBLASLt's
// printing on /dev/null.
void forward_to_job(int level, const char* function, const char* message) {
  if (level < 1 || (g_job_mask.load(std::memory_order_relaxed) & (1 << (level - 1))) == 0) return;
  if (cublasLtLoggerCallback_t callback = g_job_callback.load(std::memory_order_acquire)) callback(level, function, message);
  FILE* out = g_job_file.load(std::memory_order_acquire);
  if (out == nullptr) out = stdout;
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &local);
  std::fprintf(out, "[%s][cublasLt][%d][%s][%s] %s\n", when, static_cast<int>(getpid()), level_name(level),
               function != nullptr ? function : "", message != nullptr ? message : "");
  std::fflush(out);
}

void on_message(int level, const char* function, const char* message) {
  forward_to_job(level, function, message);
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
    if (trace.compute == GemmCompute::k32FFastTf32) g_tf32_outside.fetch_add(1, std::memory_order_relaxed);
  }
}

const char* job_logging_variable() {
  for (const char* name : {"CUBLASLT_LOG_LEVEL", "CUBLASLT_LOG_MASK", "CUBLASLT_LOG_FILE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0' && std::string_view(value) != "0") return name;
  }
  return nullptr;
}

// Gives cuBLASLt the job's settings back (after castscope, or after a failed start).
void hand_back(const Library& library) {
  const InsideCastscope inside;
  library.set_mask(g_job_mask.load());
  library.set_callback(g_job_callback.load());
  library.set_file(g_job_file.load() != nullptr ? g_job_file.load() : stdout);
}

// The real setter `name` for a job's call: the library castscope uses, else
// the next definition after castscope's, else a loaded cuBLASLt by its usual
// names; never castscope's own interposer.
void* real_setter(const char* name, void* own) {
  void* fn = g_library.handle != nullptr ? dlsym(g_library.handle, name) : nullptr;
  if (fn == nullptr || fn == own) fn = dlsym(RTLD_NEXT, name);
  for (const char* soname : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) {
    if (fn != nullptr && fn != own) break;
    if (void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      fn = dlsym(handle, name);
      dlclose(handle);  // cuBLASLt stays: it was loaded before (RTLD_NOLOAD)
    }
  }
  return fn == own ? nullptr : fn;
}

// A job's call to a setter of where messages go (the callback, the file):
// castscope's callback takes them while it is installed, so cuBLASLt gets
// the value only while castscope is not active; it is remembered either way
// (the callback forwards to it, stop() hands it back).
template <typename Value>
cublasStatus_t set_job_destination(cublasStatus_t (*real)(Value), Value value, std::atomic<Value>& job_value) {
  if (t_inside_castscope) return real != nullptr ? real(value) : CUBLAS_STATUS_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(g_mutex);
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  if (!g_active.load()) {
    const InsideCastscope inside;
    status = real != nullptr ? real(value) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  if (status == CUBLAS_STATUS_SUCCESS) job_value.store(value, std::memory_order_release);
  return status;
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
  library.set_mask = reinterpret_cast<SetIntFn>(dlsym(library.handle, "cublasLtLoggerSetMask"));
  library.set_file = reinterpret_cast<SetFileFn>(dlsym(library.handle, "cublasLtLoggerSetFile"));
  if (library.set_callback == nullptr || library.set_mask == nullptr || library.set_file == nullptr) {
    dlclose(library.handle);
    g_state = "off: the loaded cuBLASLt has no logger API (cublasLtLoggerSetCallback/SetMask/SetFile)";
    return g_state;
  }
  if (g_devnull == nullptr) g_devnull = std::fopen("/dev/null", "w");
  cublasStatus_t status = CUBLAS_STATUS_NOT_INITIALIZED;
  {
    const InsideCastscope inside;
    if (g_devnull != nullptr) status = library.set_file(g_devnull);
    if (status == CUBLAS_STATUS_SUCCESS) status = library.set_callback(&on_message);
    if (status == CUBLAS_STATUS_SUCCESS) status = library.set_mask(kTraceMask | g_job_mask.load());
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    hand_back(library);
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
  hand_back(g_library);
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
// castscope's library (an LD_PRELOAD attach): always remembered; while
// castscope's callback is installed they are honoured through it (the job's
// callback and file get the levels it asked for), otherwise they go to
// cuBLASLt as if castscope were not there.
extern "C" {

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t callback) {
  using namespace castscope;
  auto real = reinterpret_cast<SetCallbackFn>(
      real_setter("cublasLtLoggerSetCallback", reinterpret_cast<void*>(&cublasLtLoggerSetCallback)));
  return set_job_destination(real, callback, g_job_callback);
}

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetMask(int mask) {
  using namespace castscope;
  auto real = reinterpret_cast<SetIntFn>(real_setter("cublasLtLoggerSetMask", reinterpret_cast<void*>(&cublasLtLoggerSetMask)));
  if (t_inside_castscope) return real != nullptr ? real(mask) : CUBLAS_STATUS_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(g_mutex);
  cublasStatus_t status = CUBLAS_STATUS_NOT_INITIALIZED;
  if (real != nullptr) {
    const InsideCastscope inside;
    status = real(g_active.load() ? (mask | kTraceMask) : mask);
  }
  if (status == CUBLAS_STATUS_SUCCESS) g_job_mask.store(mask);
  return status;
}

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetLevel(int level) {
  using namespace castscope;
  if (t_inside_castscope) {
    auto real = reinterpret_cast<SetIntFn>(real_setter("cublasLtLoggerSetLevel", reinterpret_cast<void*>(&cublasLtLoggerSetLevel)));
    return real != nullptr ? real(level) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  if (level < 0 || level > 5) return CUBLAS_STATUS_INVALID_VALUE;
  // Level n logs every kind up to n: the same as that mask.
  return cublasLtLoggerSetMask((1 << level) - 1);
}

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerSetFile(FILE* file) {
  using namespace castscope;
  auto real = reinterpret_cast<SetFileFn>(real_setter("cublasLtLoggerSetFile", reinterpret_cast<void*>(&cublasLtLoggerSetFile)));
  return set_job_destination(real, file, g_job_file);
}

__attribute__((visibility("default"))) cublasStatus_t cublasLtLoggerOpenFile(const char* path) {
  using namespace castscope;
  if (t_inside_castscope || path == nullptr) {
    auto real = reinterpret_cast<OpenFileFn>(real_setter("cublasLtLoggerOpenFile", reinterpret_cast<void*>(&cublasLtLoggerOpenFile)));
    return real != nullptr ? real(path) : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  // Opened here, so castscope knows the file to write the job's messages to
  // and to hand back; like cuBLASLt's own, it stays open.
  FILE* file = std::fopen(path, "w");
  if (file == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  return cublasLtLoggerSetFile(file);
}

}  // extern "C"
