// libcastscope_preload.so: attaches castscope to a C++ program linked
// against libtorch, through LD_PRELOAD, without depending on torch itself.
//
// It interposes __libc_start_main: just before main, the dynamic linker has
// loaded the program's libtorch, so probing the global scope for a libtorch
// symbol tells whether this process uses torch. On a hit it loads
// libcastscope_agent.so (which binds to the libtorch already loaded, by
// soname), checks the torch release the agent was built for, and starts it
// with the JSON configuration in CASTSCOPE_CONFIG. Processes that do not link
// torch are untouched. In a Python interpreter it puts castscope_boot first on
// PYTHONPATH, whose sitecustomize attaches after `import torch`; dlopen is deliberately not
// interposed: glibc resolves a dlopen'ed name against its caller's RPATH and
// $ORIGIN, so a wrapper would break libraries such as cuDNN that load their
// siblings by name. Nothing here throws or exits: a failure is reported on
// stderr and the job runs without castscope.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/json/json_limits.h"

namespace {

// A symbol every libtorch exports: at::autocast::clear_cache().
constexpr const char* kTorchProbe = "_ZN2at8autocast11clear_cacheEv";


void report(const std::string& message) {
  std::fprintf(stderr, "[castscope] %s\n", message.c_str());
  if (const char* status = std::getenv("CASTSCOPE_STATUS_DIR")) {
    // 0600, like every file castscope writes for a job.
    const std::string path = std::string(status) + "/refused-" + std::to_string(getpid()) + ".txt";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      const std::string line = message + "\n";
      (void)!::write(fd, line.data(), line.size());
      ::close(fd);
    }
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

void start_agent(void* torch_symbol) {
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
  const char* given = std::getenv("CASTSCOPE_CONFIG");
  if (given == nullptr) given = "{}";
  // Bounded before parsing, as the agent bounds it: dump() below recurses per level.
  if (std::string error = castscope::json_limits_error(given, castscope::kMaxAgentConfigBytes,
                                                       castscope::kMaxAgentConfigNesting);
      !error.empty()) {
    report("CASTSCOPE_CONFIG " + error + "; castscope not attached");
    return;
  }
  nlohmann::json config = nlohmann::json::parse(given, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    report(std::string("CASTSCOPE_CONFIG is not ") + (config.is_discarded() ? "valid JSON" : "a JSON object") +
           "; castscope not attached");
    return;
  }
  // The torch dir marks torch's own frames; the version goes into every stats line.
  config["internal_path_prefix"] = torch_dir + "/";
  config["torch_version"] = running;
  // Invalid UTF-8 in a path becomes U+FFFD rather than an exception.
  const std::string text = config.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  char error[4096] = {0};
  if (start(text.c_str(), error, sizeof(error)) != 0) {
    report(error);
    return;
  }
  // Write what is buffered when the process exits normally.
  static void (*stop)() = reinterpret_cast<void (*)()>(dlsym(agent, "castscope_agent_finish"));
  if (stop != nullptr) std::atexit([] { stop(); });
}

void probe_global_scope() {
  if (void* symbol = dlsym(RTLD_DEFAULT, kTorchProbe)) start_agent(symbol);
}

using MainFn = int (*)(int, char**, char**);
MainFn g_real_main = nullptr;

// The folder holding castscope/ and castscope_boot/: the one above this
// shim when installed from the wheel (site-packages/castscope/), else the
// source tree's agent/python that this build came from, named in the file
// castscope-python-dir beside the shim (agent/preload/CMakeLists.txt).
// Empty when neither is there.
std::string python_package_root() {
  char resolved[PATH_MAX];
  if (realpath(own_directory().c_str(), resolved) == nullptr) return "";  // absolute, whatever LD_PRELOAD said
  const std::string installed = directory_of(resolved);
  if (access((installed + "/castscope_boot/sitecustomize.py").c_str(), R_OK) == 0) return installed;
  std::ifstream named(std::string(resolved) + "/castscope-python-dir");
  std::string source_tree;
  std::getline(named, source_tree);
  return source_tree;
}

// A Python interpreter reads PYTHONPATH when main starts: putting castscope's
// boot directory first makes its sitecustomize attach after `import torch`.
void prepare_python() {
  if (dlsym(RTLD_DEFAULT, "Py_BytesMain") == nullptr || std::getenv("CASTSCOPE_CONFIG") == nullptr) return;
  // Only castscope_boot: its sitecustomize imports the castscope package
  // beside it, so the folder above (a whole site-packages, for the wheel) never
  // comes before the job's own standard library and packages.
  const std::string root = python_package_root();
  if (root.empty()) {
    std::fprintf(stderr, "castscope: preload: no castscope package beside %s (castscope_boot/) nor a "
                         "castscope-python-dir file; Python is not attached\n", own_directory().c_str());
    return;
  }
  const std::string boot = root + "/castscope_boot";
  std::string path = boot;
  if (const char* existing = std::getenv("PYTHONPATH"); existing != nullptr && *existing != '\0') {
    if (std::string(existing).find(boot) != std::string::npos) return;
    path += std::string(":") + existing;
  }
  setenv("PYTHONPATH", path.c_str(), 1);
}

int main_with_castscope(int argc, char** argv, char** envp) {
  probe_global_scope();  // a C++ program linked against libtorch has it loaded by now
  prepare_python();
  return g_real_main(argc, argv, envp);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int __libc_start_main(MainFn main, int argc, char** argv, void (*init)(),
                                                             void (*fini)(), void (*rtld_fini)(), void* stack_end) {
  using StartFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
  auto real = reinterpret_cast<StartFn>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_real_main = main;
  return real(main_with_castscope, argc, argv, init, fini, rtld_fini, stack_end);
}

}  // extern "C"
