// libcastscope_preload.so: attaches castscope to any process through
// LD_PRELOAD, without depending on torch itself.
//
// It waits for libtorch: Python loads it with dlopen (import torch), a C++
// program gets it from the dynamic linker before main. For the first case
// dlopen is interposed and every handle it returns is probed for a libtorch
// symbol (through the handle: Python loads torch with RTLD_LOCAL, so
// RTLD_DEFAULT would not see it). For the second, __libc_start_main is
// interposed and the process is probed just before main. On a hit it loads
// libcastscope_agent.so (which binds to the libtorch already loaded, by
// soname) and starts it with the JSON configuration in CASTSCOPE_CONFIG.
// Processes that never load torch are untouched. Nothing here throws or
// exits: a failure is reported on stderr and the job runs without castscope.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

namespace {

// A symbol every libtorch exports: at::autocast::clear_cache().
constexpr const char* kTorchProbe = "_ZN2at8autocast11clear_cacheEv";

std::atomic<bool> g_started{false};
std::mutex g_start_mutex;

void report(const std::string& message) {
  std::fprintf(stderr, "[castscope] %s\n", message.c_str());
  if (const char* status = std::getenv("CASTSCOPE_STATUS_DIR")) {
    std::ofstream(std::string(status) + "/refused-" + std::to_string(getpid()) + ".txt") << message << "\n";
  }
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&report), &info) == 0 || info.dli_fname == nullptr) return ".";
  return directory_of(info.dli_fname);
}

// "2.14.1+cu130" from the torch next to the loaded libtorch: version.py in a
// wheel, build-version in a libtorch archive. Empty when neither is there.
std::string torch_version_near(const std::string& torch_dir) {
  std::ifstream in(torch_dir + "/version.py");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("__version__", 0) != 0) continue;
    const auto open = line.find_first_of("'\"");
    const auto close = line.find_last_of("'\"");
    if (open != std::string::npos && close > open) return line.substr(open + 1, close - open - 1);
  }
  std::ifstream archive(torch_dir + "/build-version");
  return std::getline(archive, line) ? line : "";
}

// The release without the local part: "2.14.1+cu130" -> "2.14.1".
std::string release_of(const std::string& version) { return version.substr(0, version.find('+')); }

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

void start_agent(void* torch_symbol) {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (g_started.exchange(true)) return;
  Dl_info info{};
  if (dladdr(torch_symbol, &info) == 0 || info.dli_fname == nullptr) {
    report("libtorch found but its path is unknown; castscope not attached");
    return;
  }
  const std::string torch_dir = directory_of(directory_of(info.dli_fname));  // .../torch/lib/libtorch_cpu.so
  const char* agent_env = std::getenv("CASTSCOPE_AGENT_LIB");
  const std::string agent_path = agent_env != nullptr ? agent_env : own_directory() + "/libcastscope_agent.so";
  void* agent = dlopen(agent_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (agent == nullptr) {
    report(std::string("cannot load the agent: ") + dlerror());
    return;
  }
  using BuildInfo = const char* (*)();
  using Start = int (*)(const char*, char*, size_t);
  auto build_version = reinterpret_cast<BuildInfo>(dlsym(agent, "castscope_agent_torch_version"));
  auto start = reinterpret_cast<Start>(dlsym(agent, "castscope_agent_start"));
  if (build_version == nullptr || start == nullptr) {
    report("the agent library lacks its entry points; castscope not attached");
    return;
  }
  const std::string running = torch_version_near(torch_dir);
  if (running.empty()) {
    report("cannot tell the version of the torch in " + torch_dir + " (no version.py or build-version); castscope not "
           "attached, since an agent built for another torch could crash the job");
    return;
  }
  if (release_of(running) != release_of(build_version())) {
    report("castscope's agent was built against torch " + std::string(build_version()) + " but this process loads torch " +
           running + " from " + torch_dir + "; castscope not attached (rebuild castscope against this torch)");
    return;
  }
  std::string config = std::getenv("CASTSCOPE_CONFIG") != nullptr ? std::getenv("CASTSCOPE_CONFIG") : "{}";
  // The torch dir marks torch's own frames; the version goes into every stats line.
  const auto close = config.rfind('}');
  if (close == std::string::npos) {
    report("CASTSCOPE_CONFIG is not a JSON object; castscope not attached");
    return;
  }
  const bool empty = config.find_first_not_of(" \t\n{") == close;
  config.insert(close, std::string(empty ? "" : ",") + "\"internal_path_prefix\": \"" + json_escape(torch_dir) +
                           "/\", \"torch_version\": \"" + json_escape(running) + "\"");
  char error[4096] = {0};
  if (start(config.c_str(), error, sizeof(error)) != 0) {
    report(error);
    return;
  }
  // Python processes: source locations through the CPython-aware reader.
  if (dlsym(RTLD_DEFAULT, "Py_IsInitialized") != nullptr) {
    void* reader = dlopen((directory_of(agent_path) + "/libcastscope_python.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    auto init = reader ? reinterpret_cast<void (*)(void*, const char*, const char*, int)>(dlsym(reader, "castscope_python_init")) : nullptr;
    auto locate = reader ? dlsym(reader, "castscope_python_location") : nullptr;
    auto set_reader = reinterpret_cast<void (*)(void*)>(dlsym(agent, "castscope_agent_set_location_reader"));
    if (init != nullptr && locate != nullptr && set_reader != nullptr) {
      const char* stacks = std::getenv("CASTSCOPE_STACKS");
      const char* own = std::getenv("CASTSCOPE_PYTHON_DIR");
      init(dlsym(agent, "castscope_intern_location"), (torch_dir + "/").c_str(), own != nullptr ? own : "",
           stacks != nullptr && std::strcmp(stacks, "0") != 0);
      set_reader(locate);
    }
  }
  // Write what is buffered when the process exits normally.
  static void (*stop)() = reinterpret_cast<void (*)()>(dlsym(agent, "castscope_agent_finish"));
  if (stop != nullptr) std::atexit([] { stop(); });
}

// `handle` may be RTLD_DEFAULT, which is a null pointer.
void probe(void* handle) {
  if (g_started.load(std::memory_order_relaxed)) return;
  if (void* symbol = dlsym(handle, kTorchProbe)) start_agent(symbol);
}

using MainFn = int (*)(int, char**, char**);
MainFn g_real_main = nullptr;

int main_with_castscope(int argc, char** argv, char** envp) {
  probe(RTLD_DEFAULT);  // a C++ program linked against libtorch has it loaded by now
  return g_real_main(argc, argv, envp);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using DlopenFn = void* (*)(const char*, int);
  static DlopenFn real = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  void* handle = real(file, mode);
  if (handle != nullptr) probe(handle);
  return handle;
}

__attribute__((visibility("default"))) int __libc_start_main(MainFn main, int argc, char** argv, void (*init)(),
                                                             void (*fini)(), void (*rtld_fini)(), void* stack_end) {
  using StartFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
  auto real = reinterpret_cast<StartFn>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_real_main = main;
  return real(main_with_castscope, argc, argv, init, fini, rtld_fini, stack_end);
}

}  // extern "C"
