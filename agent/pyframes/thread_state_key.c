/* The thread-specific key under which CPython 3.11 keeps each thread's own
 * thread state (what PyGILState_GetThisThreadState reads), for the frame
 * reader to read it without that call's two calls. In C: the runtime's
 * internal header uses C11 atomics, which C++ cannot include. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define CASTSCOPE_KNOWS_THREAD_STATE_KEY 1
#define Py_BUILD_CORE 1
#include <internal/pycore_runtime.h>
#undef Py_BUILD_CORE
#endif

#include "thread_state_key.h"

int castscope_thread_state_key(pthread_key_t* key) {
#ifdef CASTSCOPE_KNOWS_THREAD_STATE_KEY
  const Py_tss_t* tss = &_PyRuntime.gilstate.autoTSSkey;
  if (!tss->_is_initialized) return 0;
  *key = tss->_key;
  return 1;
#else
  (void)key;
  return 0; /* another layout: the reader takes the GIL path */
#endif
}
