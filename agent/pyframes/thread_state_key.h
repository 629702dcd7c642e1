/* The runtime's key of each thread's own thread state (CPython 3.11 only,
 * the layout thread_state_key.c is compiled against). */
#pragma once

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 and the key in `key` when the runtime has made it; 0 when not, or on a
 * CPython other than 3.11. */
int castscope_thread_state_key(pthread_key_t* key);

#ifdef __cplusplus
}
#endif
