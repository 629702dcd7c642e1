// The Python frame reader: innermost user frame of the calling thread, as a
// castscope location id. Built as its own small library, loaded only into
// Python processes, so libcastscope_agent.so never depends on CPython (a C++
// program could not load it otherwise). CPython symbols resolve against the
// running interpreter at load time.
//
// Cost control: the GIL is taken only when the thread has a Python thread
// state; "is this code object the user's" (the agent's castscope_source_kind,
// the one rule: agent/src/record/user_code.h) is cached per code object, and
// the resulting location per (code object, instruction offset) of the first
// user frame. Cached code objects are kept alive (a reference each), so an
// address is never reused for another function while cached. All caches are
// touched only with the GIL held.
//
// torch.compile (docs/compile.md): frames of FX-generated code
// (`<eval_with_key>.N`) and the lines torch.compile traces are mapped to the
// user's line by castscope._fx_lines, imported on first need.
//
// Known sites without the GIL (CPython 3.11 only, the layout this file is
// compiled against): what the GIL path learns is also kept per thread (code
// kinds, site ids), and a later call first walks the calling thread's own
// interpreter frames without the GIL. Why that is safe:
// - only the owning thread pushes, pops or advances its frames, and it is
//   inside the autocast kernel (torch released the GIL around the op), so its
//   frame chain, each frame's code and its instruction pointer hold still;
//   other threads (the GC included) never write the fields read here of
//   another thread's executing frames (sys._current_frames, and the
//   backward's caller below, give them frame objects: frame_obj alone);
// - every code object the per-thread caches name is kept alive by the global
//   caches (a reference each, never dropped), so an address found in a frame
//   can only match the code object it was cached for;
// - the one time another thread frees this thread's frames is interpreter
//   finalization (daemon threads' states are deleted): an atexit hook, which
//   runs before that, turns the fast path off and waits for readers inside it;
// - the thread's state is read from CPython's thread-specific key, which a
//   forked child's CPython makes anew (_PyGILState_Reinit): the child turns
//   the fast path off at the fork, and its first GIL read takes the new key
//   and turns it back on;
// - anything unknown (a new site, generated code, stacks on, another Python
//   version at run time) takes the GIL path as before.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define CASTSCOPE_FRAMES_WITHOUT_GIL 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#include "thread_state_key.h"
#endif
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include "castscope/agent.h"

namespace {

using InternFn = unsigned (*)(int kind, const char* file, unsigned line, const char* function, const char* stack,
                              int library);

using SourceKindFn = int (*)(const char* file);

InternFn g_intern = nullptr;
SourceKindFn g_source_kind = nullptr;
bool g_stacks = false;
// kLibrary + a CastMaker value: a maker library's code (castscope_source_kind),
// skipped as internal code is, and named with the line it reaches.
enum class CodeKind : int { kUser = 0, kInternal = 1, kGenerated = 2, kLibrary = CASTSCOPE_SOURCE_LIBRARY };
int library_of(CodeKind kind) {
  return static_cast<int>(kind) > CASTSCOPE_SOURCE_LIBRARY ? static_cast<int>(kind) - CASTSCOPE_SOURCE_LIBRARY : 0;
}
// Whether a frame of this code is passed over on the way to the user's line.
bool skipped(CodeKind kind) { return kind == CodeKind::kInternal || library_of(kind) != 0; }
std::unordered_map<PyCodeObject*, CodeKind> g_code_kinds;
// A user (or generated) frame's instruction, and the innermost maker library
// passed on the way to it (0: none): the same line reached through torchao
// and directly are two locations.
struct CodeSite {
  PyCodeObject* code;
  int lasti;
  int library = 0;
  bool operator==(const CodeSite& o) const { return code == o.code && lasti == o.lasti && library == o.library; }
  bool operator!=(const CodeSite& o) const { return !(*this == o); }
};
struct CodeSiteHash {
  size_t operator()(const CodeSite& k) const {
    return (std::hash<void*>()(k.code) * 31 + static_cast<size_t>(k.lasti)) * 31 + static_cast<size_t>(k.library);
  }
};
std::unordered_map<CodeSite, unsigned, CodeSiteHash> g_sites;

// The calling thread's copy of what the GIL path learned (see the top of the
// file); written by this thread only, under the GIL, read by it without.
struct ThreadSites {
  std::unordered_map<PyCodeObject*, CodeKind> kinds;
  std::unordered_map<CodeSite, unsigned, CodeSiteHash> sites;
  // The last answer whose user frame was the innermost one: a loop calling
  // one op from one line finds it without a hash lookup. Valid for good, as
  // the maps above only grow.
  CodeSite last{nullptr, 0};
  unsigned last_id = 0;
};
// Reached through one constant-initialized pointer: a thread_local with a
// constructor costs its guard and wrapper on every access, three TLS look-ups
// per op where this is one (docs/performance.md, "ninth pass"). Made on the
// thread's first read under the GIL; its owner, touched only then, frees it
// when the thread exits and leaves the pointer null (a read after that finds
// nothing known and takes the GIL path, which then remembers nothing).
thread_local constinit ThreadSites* t_known = nullptr;
thread_local constinit bool t_known_gone = false;  // the owner has run: make no new one
struct ThreadSitesOwner {
  ThreadSites* sites = nullptr;
  // The agent's copy of `sites` for this thread (castscope_python_location_for's
  // `thread_state`, in the agent's constant-initialized, trivially destructible
  // thread block: still there while this destructor runs); nullptr: none given.
  void** agent_copy = nullptr;
  ~ThreadSitesOwner() {
    t_known = nullptr;
    t_known_gone = true;
    if (agent_copy != nullptr) *agent_copy = nullptr;
    delete sites;
  }
};
thread_local ThreadSitesOwner t_known_owner;

// The calling thread's sites, made on first use; nullptr once the thread is exiting.
ThreadSites* thread_sites() {
  if (t_known == nullptr && !t_known_gone) {
    ThreadSitesOwner& owner = t_known_owner;
    owner.sites = new ThreadSites();
    t_known = owner.sites;
  }
  return t_known;
}

// The fast path runs only while on; readers counts threads inside it (the
// atexit hook waits for them). Both sequentially consistent: a reader raises
// the count, then reads the flag; the hook clears the flag, then reads the count.
std::atomic<bool> g_without_gil{false};
std::atomic<int> g_readers{0};
bool g_at_fork_registered = false;  // with the GIL held
// A forked child's fast path was on at the fork: the GIL path reads the
// thread-state key again (CPython made a new one) before turning it back on.
std::atomic<bool> g_key_after_fork{false};

// Whether the interpreter is finalizing: a thread that takes the GIL then may never get it back.
bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

std::string utf8(PyObject* text) {
  const char* s = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
  if (s == nullptr) {
    PyErr_Clear();
    return "";
  }
  return s;
}

CodeKind code_kind(PyCodeObject* code) {
  auto found = g_code_kinds.find(code);
  if (found != g_code_kinds.end()) return found->second;
  CodeKind kind = CodeKind::kInternal;
  switch (const int source = g_source_kind(utf8(code->co_filename).c_str()); source) {
    case CASTSCOPE_SOURCE_USER: kind = CodeKind::kUser; break;
    case CASTSCOPE_SOURCE_GENERATED: kind = CodeKind::kGenerated; break;
    default:
      if (source > CASTSCOPE_SOURCE_LIBRARY) kind = static_cast<CodeKind>(source);
      break;
  }
  Py_INCREF(code);
  g_code_kinds.emplace(code, kind);
  return kind;
}

// code_kind, remembered for this thread's reads without the GIL.
CodeKind known_code_kind(PyCodeObject* code) {
  const CodeKind kind = code_kind(code);
  if (ThreadSites* known = thread_sites()) known->kinds.emplace(code, kind);
  return kind;
}

#ifdef CASTSCOPE_FRAMES_WITHOUT_GIL
// PyFrame_GetLasti's value, from the interpreter frame.
int frame_lasti(_PyInterpreterFrame* frame) {
  const int lasti = _PyInterpreterFrame_LASTI(frame);
  return lasti < 0 ? -1 : lasti * static_cast<int>(sizeof(_Py_CODEUNIT));
}

// The calling thread's innermost user frame's site id when this thread has
// seen it before; false when the GIL path must decide. Walks the frames the
// way PyThreadState_GetFrame and PyFrame_GetBack do (incomplete frames
// skipped). Asked after last_site, which answers the thread's last site
// (the innermost frame's, most ops), so this does not ask it again; out of
// line.
[[gnu::noinline]] bool known_site(PyThreadState* tstate, ThreadSites& known, unsigned& id) {
  bool innermost = true;
  int library = 0;
  for (_PyInterpreterFrame* frame = tstate->cframe->current_frame; frame != nullptr; frame = frame->previous) {
    if (_PyFrame_IsIncomplete(frame)) continue;
    const auto kind = known.kinds.find(frame->f_code);
    if (kind == known.kinds.end() || kind->second == CodeKind::kGenerated) return false;
    if (skipped(kind->second)) {
      innermost = false;
      if (library == 0) library = library_of(kind->second);
      continue;
    }
    const CodeSite key{frame->f_code, frame_lasti(frame), library};
    const auto site = known.sites.find(key);
    if (site == known.sites.end()) return false;
    id = site->second;
    if (innermost) {
      known.last = key;
      known.last_id = id;
    }
    return true;
  }
  return false;
}

// known_site's first answer alone: the innermost frame is the thread's last
// answer (a loop calling ops from one line). Inlined into the entry, which
// then saves few registers.
[[gnu::always_inline]] inline bool last_site(PyThreadState* tstate, const ThreadSites& known, unsigned& id) {
  _PyInterpreterFrame* frame = tstate->cframe->current_frame;
  while (frame != nullptr && _PyFrame_IsIncomplete(frame)) frame = frame->previous;
  if (frame == nullptr || CodeSite{frame->f_code, frame_lasti(frame)} != known.last) return false;
  id = known.last_id;
  return true;
}

// The calling thread's own thread state, as PyGILState_GetThisThreadState
// reads it (the runtime's thread-specific key), without its two calls
// (~12 instructions an op): the key is read once, with the GIL held, by
// start_reading_without_gil, which checks it names this thread's state.
pthread_key_t g_thread_state_key;
PyThreadState* this_thread_state() { return static_cast<PyThreadState*>(pthread_getspecific(g_thread_state_key)); }

// With the GIL held: takes the runtime's key into g_thread_state_key; false
// when there is none, or it does not name this thread's state (not the
// layout compiled against).
bool take_thread_state_key() {
  return castscope_thread_state_key(&g_thread_state_key) != 0 && this_thread_state() == PyGILState_GetThisThreadState();
}

// Asked first, before Py_IsInitialized: while this path is on the
// interpreter is up (the atexit hook turns it off, and waits for readers,
// before finalization), so a known site costs no call to ask.
[[gnu::always_inline]] inline bool read_known_site(ThreadSites* sites, unsigned& id) {
  if (sites == nullptr) return false;
  g_readers.fetch_add(1);
  bool found = false;
  if (g_without_gil.load()) {
    PyThreadState* const tstate = this_thread_state();
    found = tstate != nullptr && (last_site(tstate, *sites, id) || known_site(tstate, *sites, id));
  }
  g_readers.fetch_sub(1);
  return found;
}

// atexit: before finalization may free daemon threads' frames.
PyObject* stop_reading_without_gil(PyObject* /*self*/, PyObject* /*unused*/) {
  g_without_gil.store(false);
  while (g_readers.load() != 0) sched_yield();
  Py_RETURN_NONE;
}

PyMethodDef g_stop_method = {"castscope_stop_reading_frames_without_gil", stop_reading_without_gil, METH_NOARGS,
                             nullptr};

// With the GIL held. On only when the running interpreter is the minor
// version this file was compiled for (the frame layout is not a stable API).
void start_reading_without_gil() {
  if (g_without_gil.load() || g_stacks) return;
  if ((Py_Version >> 16) != (PY_VERSION_HEX >> 16)) return;
  if (!take_thread_state_key()) return;
  PyObject* atexit = PyImport_ImportModule("atexit");
  PyObject* hook = atexit != nullptr ? PyCFunction_New(&g_stop_method, nullptr) : nullptr;
  PyObject* done = hook != nullptr ? PyObject_CallMethod(atexit, "register", "O", hook) : nullptr;
  if (done != nullptr) {
    // A forked child has only the forking thread, which is not reading.
    if (!g_at_fork_registered)
      g_at_fork_registered = pthread_atfork(nullptr, nullptr, [] {
                               g_readers.store(0);
                               if (g_without_gil.exchange(false)) g_key_after_fork.store(true);
                             }) == 0;
    g_without_gil.store(g_at_fork_registered);
  } else {
    PyErr_Clear();
  }
  Py_XDECREF(done);
  Py_XDECREF(hook);
  Py_XDECREF(atexit);
}
#endif

// castscope._fx_lines's functions, looked up once (with the GIL held; plain
// globals, not function-local statics: the import may release the GIL, and
// another thread blocking on a static's guard while holding it would never
// let go).
PyObject* g_graph_code_line = nullptr;
PyObject* g_tracing_line = nullptr;
bool g_fx_lines_looked_up = false;

void look_up_fx_lines() {
  if (g_fx_lines_looked_up) return;
  g_fx_lines_looked_up = true;
  PyObject* module = PyImport_ImportModule("castscope._fx_lines");
  if (module == nullptr) {
    PyErr_Clear();
    return;
  }
  g_graph_code_line = PyObject_GetAttrString(module, "graph_code_line");
  g_tracing_line = PyObject_GetAttrString(module, "tracing_line");
  if (PyErr_Occurred()) PyErr_Clear();
  Py_DECREF(module);
}

// Interns a (file, line, function) tuple from castscope._fx_lines; 0 for None.
unsigned intern_user_line(PyObject* result) {
  if (result == nullptr || !PyTuple_Check(result) || PyTuple_Size(result) != 3) return 0;
  const std::string file = utf8(PyTuple_GetItem(result, 0));
  const long line = PyLong_AsLong(PyTuple_GetItem(result, 1));
  const std::string function = utf8(PyTuple_GetItem(result, 2));
  if (PyErr_Occurred()) PyErr_Clear();
  if (file.empty() || line <= 0) return 0;
  return g_intern(1, file.c_str(), static_cast<unsigned>(line), function.c_str(), "", 0);
}

// A generated-code frame's user line (0: none, skip the frame).
unsigned generated_frame_line(PyFrameObject* frame) {
  look_up_fx_lines();
  if (g_graph_code_line == nullptr) return 0;
  PyObject* result = PyObject_CallOneArg(g_graph_code_line, reinterpret_cast<PyObject*>(frame));
  if (result == nullptr) PyErr_Clear();
  const unsigned id = intern_user_line(result);
  Py_XDECREF(result);
  return id;
}

std::string frame_line(PyFrameObject* frame, PyCodeObject* code) {
  return utf8(code->co_filename) + ":" + std::to_string(PyFrame_GetLineNumber(frame)) + " " + utf8(code->co_qualname);
}

unsigned resolve(PyFrameObject* user_frame, PyCodeObject* code, PyFrameObject* innermost, int library) {
  std::string stack;
  if (g_stacks) {
    Py_INCREF(innermost);
    for (PyFrameObject* f = innermost; f != nullptr;) {
      PyCodeObject* c = PyFrame_GetCode(f);
      stack += (stack.empty() ? "" : "\n") + frame_line(f, c);
      Py_DECREF(c);
      PyFrameObject* back = PyFrame_GetBack(f);
      Py_DECREF(f);
      f = back;
    }
  }
  const std::string file = utf8(code->co_filename);
  const std::string function = utf8(code->co_qualname);
  return g_intern(1, file.c_str(), static_cast<unsigned>(PyFrame_GetLineNumber(user_frame)), function.c_str(),
                  stack.c_str(), library);
}

// castscope_python_location's answer when no known site is found without the GIL (below the entry points).
unsigned location_with_gil();

// castscope_python_location_for's when no known site is found: out of line,
// so that the entry's known site saves no registers for this.
[[gnu::noinline]] unsigned location_with_gil_for(void** thread_state) {
  if (g_intern == nullptr) return 0;
  const unsigned id = location_with_gil();
  // Given once this thread's sites exist (the GIL path made them): the
  // owner takes the agent's copy back when it frees them.
  // One copy per thread: a second agent's block (two agent builds sharing
  // this reader) is not given one, and takes this path every time.
  if (*thread_state == nullptr && t_known != nullptr) {
    ThreadSitesOwner& owner = t_known_owner;
    if (owner.agent_copy == nullptr || owner.agent_copy == thread_state) {
      *thread_state = t_known;
      owner.agent_copy = thread_state;
    }
  }
  return id;
}

}  // namespace

extern "C" {

// `intern` and `source_kind`: the agent's castscope_intern_location and
// castscope_source_kind.
__attribute__((visibility("default"))) void castscope_python_init(InternFn intern, SourceKindFn source_kind,
                                                                   int stacks) {
  g_source_kind = source_kind;
  g_intern = source_kind != nullptr ? intern : nullptr;  // both or the reader stays off
  g_stacks = stacks != 0;
#ifdef CASTSCOPE_FRAMES_WITHOUT_GIL
  start_reading_without_gil();
#endif
}

// Returns 0 when the thread has no Python frame (autograd worker threads, a
// C++ program) or the reader is not initialized.
__attribute__((visibility("default"))) unsigned castscope_python_location(void) {
  if (g_intern == nullptr) return 0;
#ifdef CASTSCOPE_FRAMES_WITHOUT_GIL
  if (unsigned known = 0; read_known_site(t_known, known)) return known;
#endif
  return location_with_gil();
}

// The same for the agent's autocast kernels, which keep this thread's sites
// in their own thread block (`thread_state`, nullptr at first): a known site
// is found without the thread_local look-up (__tls_get_addr: a call into the
// dynamic loader, this library being dlopen'ed) the call above makes.
__attribute__((visibility("default"))) unsigned castscope_python_location_for(void** thread_state) {
#ifdef CASTSCOPE_FRAMES_WITHOUT_GIL
  if (unsigned known = 0; g_intern != nullptr && read_known_site(static_cast<ThreadSites*>(*thread_state), known)) return known;
#endif
  return location_with_gil_for(thread_state);
}

}  // extern "C"

namespace {

unsigned location_with_gil() {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return 0;
  const PyGILState_STATE gil = PyGILState_Ensure();
#ifdef CASTSCOPE_FRAMES_WITHOUT_GIL
  // In a forked child, after CPython remade the thread-state key (before
  // any Python code, so before this GIL is ours): the new key, checked,
  // and the fast path back on. Readers see the key once they see it on.
  if (g_key_after_fork.exchange(false)) [[unlikely]] {
    if (take_thread_state_key()) g_without_gil.store(true);
  }
#endif
  // Leave any exception the thread already carries exactly as it was.
  PyObject *error_type = nullptr, *error_value = nullptr, *error_traceback = nullptr;
  PyErr_Fetch(&error_type, &error_value, &error_traceback);
  unsigned id = 0;
  int library = 0;  // the innermost maker library passed
  PyFrameObject* innermost = PyThreadState_GetFrame(PyThreadState_Get());
  PyFrameObject* frame = innermost;
  if (frame != nullptr) Py_INCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const CodeKind kind = known_code_kind(code);
    if (skipped(kind) && library == 0) library = library_of(kind);
    if (!skipped(kind)) {
      const CodeSite key{code, g_stacks && kind == CodeKind::kUser ? -1 : PyFrame_GetLasti(frame), library};
      auto found = g_stacks && kind == CodeKind::kUser ? g_sites.end() : g_sites.find(key);
      if (found != g_sites.end()) {
        id = found->second;
      } else {
        id = kind == CodeKind::kGenerated ? generated_frame_line(frame) : resolve(frame, code, innermost, library);
        if (!g_stacks || kind == CodeKind::kGenerated) {
          Py_INCREF(code);  // keep the key's address ours while cached
          g_sites.emplace(key, id);
        }
      }
      ThreadSites* const known = !g_stacks && kind == CodeKind::kUser ? thread_sites() : nullptr;
      if (known != nullptr) known->sites.emplace(key, id);
      // A generated line with no user frame behind it: go on to its caller.
      if (id != 0 || kind == CodeKind::kUser) {
        Py_DECREF(code);
        Py_DECREF(frame);
        frame = nullptr;
        break;
      }
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(code);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(innermost);
  PyErr_Restore(error_type, error_value, error_traceback);
  PyGILState_Release(gil);
  return id;
}

}  // namespace

extern "C" {

// For a backward with no user frame on its thread (autograd's device
// threads run a CUDA graph's nodes; torchao's backward is Python there, with
// only library frames): the user's line of the one Python thread waiting in
// the engine, whose innermost frame is torch.autograd.graph's
// _engine_run_backward (loss.backward(), torch.autograd.grad). 0 when no
// thread or more than one waits (backwards on several threads: which one
// is this thread's cannot be told from here), or while the interpreter
// finalizes. The threads' frames come from _PyThread_CurrentFrames (what
// sys._current_frames returns, read under the interpreter's thread-list
// lock). Creates this thread's Python state if it has none; the agent asks
// once per graph task and thread.
__attribute__((visibility("default"))) unsigned castscope_python_backward_caller_location(void) {
  if (g_intern == nullptr || !Py_IsInitialized() || finalizing()) return 0;
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *error_type = nullptr, *error_value = nullptr, *error_traceback = nullptr;
  PyErr_Fetch(&error_type, &error_value, &error_traceback);
  unsigned id = 0;
  PyObject* frames = _PyThread_CurrentFrames();  // {thread id: innermost frame}
  if (frames == nullptr) PyErr_Clear();
  PyFrameObject* waiting = nullptr;  // borrowed from `frames`
  int waiters = 0;
  PyObject *key = nullptr, *value = nullptr;
  for (Py_ssize_t at = 0; frames != nullptr && PyDict_Next(frames, &at, &key, &value);) {
    if (!PyFrame_Check(value)) continue;
    PyCodeObject* code = PyFrame_GetCode(reinterpret_cast<PyFrameObject*>(value));
    if (utf8(code->co_name) == "_engine_run_backward" && ++waiters == 1) waiting = reinterpret_cast<PyFrameObject*>(value);
    Py_DECREF(code);
  }
  if (waiters == 1) {
    int library = 0;
    PyFrameObject* frame = waiting;
    Py_INCREF(frame);
    while (frame != nullptr) {
      PyCodeObject* code = PyFrame_GetCode(frame);
      const CodeKind kind = code_kind(code);
      if (skipped(kind) && library == 0) library = library_of(kind);
      if (kind == CodeKind::kUser) id = resolve(frame, code, waiting, library);
      PyFrameObject* back = id != 0 ? nullptr : PyFrame_GetBack(frame);
      Py_DECREF(code);
      Py_DECREF(frame);
      frame = back;
    }
  }
  Py_XDECREF(frames);
  PyErr_Restore(error_type, error_value, error_traceback);
  PyGILState_Release(gil);
  return id;
}

// While torch.compile traces: the user's line of the FX node being traced,
// or 0 (the caller then reads the calling Python line).
__attribute__((visibility("default"))) unsigned castscope_python_tracing_location(void) {
  if (g_intern == nullptr || !Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return 0;
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *error_type = nullptr, *error_value = nullptr, *error_traceback = nullptr;
  PyErr_Fetch(&error_type, &error_value, &error_traceback);
  unsigned id = 0;
  look_up_fx_lines();
  if (g_tracing_line != nullptr) {
    PyObject* result = PyObject_CallNoArgs(g_tracing_line);
    if (result == nullptr) PyErr_Clear();
    id = intern_user_line(result);
    Py_XDECREF(result);
  }
  PyErr_Restore(error_type, error_value, error_traceback);
  PyGILState_Release(gil);
  return id;
}

}  // extern "C"
