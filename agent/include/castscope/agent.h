/* castscope agent: the whole public surface of libcastscope_agent.so.
 *
 * Everything else in the library is hidden (-fvisibility=hidden). Calls are
 * safe from any thread; start/stop are serialized internally. No function
 * throws: failures come back as return values and messages.
 */
#ifndef CASTSCOPE_AGENT_H_
#define CASTSCOPE_AGENT_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CASTSCOPE_EXPORT __attribute__((visibility("default")))

/* Starts the agent. `config_json` is an object:
 *   {"policy_files": ["policies/cpu.json", "my_overlay.json"],  (required; later files override)
 *    "events_path": "events.jsonl",  (optional JSON-lines dump of castscope.v1.Event)
 *    "record_events": true, "ring_records": 16384, "max_threads": 12,
 *    "flush_interval_ms": 50, "torch_version": "2.14.1",
 *    "collector": "127.0.0.1:7070", "spool_dir": "/path", "run_id": "...",  (optional transport, see
 *    "batch_events": 4096, "spool_max_bytes": ..., "token_env": "CASTSCOPE_TOKEN", "tls_ca": "ca.pem"}  docs/operations.md)
 * "{pid}" in events_path is replaced by the process id. 
 * Returns 0 on success. Otherwise returns non-zero (2 when the policy cannot
 * run here: a policy error, or a check against the dispatcher; 1 for anything
 * else), writes a NUL-terminated message (truncated to err_len) and leaves
 * native autocast in place. */
CASTSCOPE_EXPORT int castscope_agent_start(const char* config_json, char* err, size_t err_len);

/* Unregisters castscope's kernels (native autocast takes over again), drains
 * every buffered event and closes the dump. Returns 0; 1 when not started. */
CASTSCOPE_EXPORT int castscope_agent_stop(void);

/* Drains buffered events to the dump now. Returns the number written. */
CASTSCOPE_EXPORT long castscope_agent_flush(void);

/* Writes a JSON status object into buf (NUL-terminated, truncated to len).
 * Returns the full length, so a caller can retry with a larger buffer. */
CASTSCOPE_EXPORT size_t castscope_agent_status(char* buf, size_t len);

/* Loads the policy files of `config_json` (same format as start) and checks
 * them against the running dispatcher without registering anything. Writes
 * {"ok": bool, "errors": [...], "findings": [...]} into buf like status. */
CASTSCOPE_EXPORT size_t castscope_policy_check(const char* config_json, char* buf, size_t len);

/* Marks the end of a training iteration (an optimizer step): samples the
 * live casts of the native cast cache into the event stream. */
CASTSCOPE_EXPORT void castscope_agent_mark_iteration(void);

/* GradScaler.update() ran (the Python package calls it): the scale after
 * the update, whether the step before it was skipped (found inf/NaN) and the
 * scaler's updates so far. Recorded at the calling Python line; a skip may
 * open a numerics window (docs/numerics.md). */
CASTSCOPE_EXPORT void castscope_agent_scaler_update(double scale, int found_inf, unsigned long long updates);

/* A torch.cuda.graph capture begins (1) or ends (0) (the Python package
 * brackets it): numerics windows check no CUDA tensor and read no device
 * sums meanwhile, so nothing of castscope's joins the graph. */
CASTSCOPE_EXPORT void castscope_agent_cuda_graph_capture(int begin);

/* Installs the function that returns the calling thread's innermost user
 * Python frame as a location id (NULL: none). Set by the Python frame
 * reader library, so the agent itself never links CPython. */
CASTSCOPE_EXPORT void castscope_agent_set_location_reader(unsigned (*reader)(void));
/* The same answer for the autocast kernels, the reader keeping its state for
 * the calling thread in `*thread_state` (the agent's, one per thread, NULL at
 * first; the reader's to set and to clear when it frees that state) instead
 * of a thread-local variable of its own. Set with the reader above (NULL:
 * the kernels call that one). */
CASTSCOPE_EXPORT void castscope_agent_set_thread_location_reader(unsigned (*reader)(void** thread_state));

/* Interns a source location; returns its id. kind: 1 Python, 2 TorchScript,
 * 3 none. `stack` holds "file:line function" lines, innermost first, or "". */
CASTSCOPE_EXPORT unsigned castscope_intern_location(int kind, const char* file, unsigned line, const char* function,
                                                    const char* stack);
/* The same for a Python line reached through a maker library's code:
 * `library` is its CastMaker value (castscope_source_kind's value less
 * CASTSCOPE_SOURCE_LIBRARY), 0 for none. The frame reader's. */
CASTSCOPE_EXPORT unsigned castscope_intern_library_location(int kind, const char* file, unsigned line,
                                                            const char* function, const char* stack, int library);

/* Whether a Python source file is the user's: the one rule behind every user
 * line castscope reports (the frame reader, TorchScript's traced stacks,
 * torch.compile's calling line, FX stack traces). Files under torch's package
 * (the config's internal_path_prefix) or a directory added below, frozen
 * modules and code with no file are internal; FX-generated code
 * ("<eval_with_key>.N") is a kind of its own. A file of a library named as
 * the maker of its casts (torchao, FSDP, Transformer Engine) is not the
 * user's either: CASTSCOPE_SOURCE_LIBRARY plus its CastMaker value. No lock;
 * any thread. */
enum {
  CASTSCOPE_SOURCE_USER = 0,
  CASTSCOPE_SOURCE_INTERNAL = 1,
  CASTSCOPE_SOURCE_GENERATED = 2,
  CASTSCOPE_SOURCE_LIBRARY = 16
};
CASTSCOPE_EXPORT int castscope_source_kind(const char* file);
/* Adds a directory (ending in a separator) whose files are never the user's:
 * castscope's Python package, as its code objects name it. */
CASTSCOPE_EXPORT void castscope_add_internal_dir(const char* dir);

/* Brackets torch.jit.trace on the calling thread (nests): while recording,
 * ops that run with autocast off are recorded too, so a traced graph that
 * dropped an `autocast(enabled=False)` can be recognised later. */
CASTSCOPE_EXPORT void castscope_agent_trace_recording(int begin);
/* torch.profiler is about to collect GPU activity (begin=1) or is done
 * (begin=0): GPU timing steps aside from CUPTI and comes back (docs/gpu.md). */
CASTSCOPE_EXPORT void castscope_agent_gpu_profiler(int begin);
/* The torch version the agent was built against (TORCH_VERSION). */
CASTSCOPE_EXPORT const char* castscope_agent_torch_version(void);

/* Module and function overlays (docs/overlays.md), for castscope's Python
 * wrappers, which cast with Tensor.to() themselves.
 * castscope_overlay_op interns an overlay's name ("module::torchvision.ops.RoIPool")
 * as an op with its argument names ('\n'-separated); returns its id, 0 on failure. */
CASTSCOPE_EXPORT unsigned castscope_overlay_op(const char* name, const char* arg_names);
/* Records one decision of a wrapper, in the calling thread's context (its
 * Python line). Enums take the values of proto/castscope/v1/events.proto;
 * `shape` holds `ndim` sizes. An argument out of range is counted as an
 * internal error and nothing is recorded. */
CASTSCOPE_EXPORT void castscope_overlay_cast(unsigned op_id, int policy, int device, int src, int dst, int outcome,
                                             int role, int arg_index, int list_index, const long long* shape, int ndim,
                                             unsigned long long bytes);
/* An overlay entry skipped (its attribute missing when its module was
 * imported...): logged as a warning, counted and sent with the agent's stats. */
CASTSCOPE_EXPORT void castscope_overlay_error(const char* message);

/* torch.compile capture (docs/compile.md), for castscope/compile_capture.py.
 * castscope_compile_epoch: Dynamo began a compile; records made while tracing
 * are deduplicated per epoch.
 * castscope_compile_collect: on the calling thread, keep (on=1) or stop
 * keeping every cast decision made while tracing, duplicates included.
 * castscope_compile_decisions: the kept decisions as a JSON array, written
 * into buf like status, then forgotten.
 * castscope_compiled_graph: registers one compiled graph's autocast casts
 * (JSON: {"kind", "casts": [...]}, compiled_graph_json.h); returns its id, 0 when rejected (logged,
 * counted as an internal error).
 * castscope_compiled_graph_ran: records one run of a graph; calling_location
 * 0 reads the calling Python line, else a location id an earlier run
 * returned. Returns the location id the run used.
 * castscope_compile_records: the COMPILING records logged while collecting,
 * as JSON (compile_record_replay.h), written into buf like status, then
 * forgotten; castscope_compile_replay logs such records again on the calling
 * thread (a graph served from AOTAutogradCache, whose trace never ran) and
 * returns how many, -1 when the text is rejected (logged, counted as an
 * internal error). */
CASTSCOPE_EXPORT void castscope_compile_epoch(void);
/* castscope's own Python code failed (compile capture): logs `what` as a
 * warning and counts an internal error; the job goes on. */
CASTSCOPE_EXPORT void castscope_internal_error(const char* what);
CASTSCOPE_EXPORT void castscope_compile_collect(int on);
CASTSCOPE_EXPORT size_t castscope_compile_decisions(char* buf, size_t len);
CASTSCOPE_EXPORT unsigned castscope_compiled_graph(const char* json);
CASTSCOPE_EXPORT unsigned castscope_compiled_graph_ran(unsigned graph, unsigned calling_location);
/* Brackets a compiled graph's run on the calling thread (on 1, off 0; set,
 * not counted): the conversions it dispatches are the graph's, recorded from
 * the graph (castscope_compiled_graph), not again as explicit casts. */
CASTSCOPE_EXPORT void castscope_compiled_graph_running(int on);
/* Brackets a conversion castscope's Python code makes and records itself
 * (a callable overlay's cast): not recorded again as an explicit one. */
CASTSCOPE_EXPORT void castscope_own_conversion(int on);
/* Brackets a library's conversion to float8 on the calling thread (torchao's
 * _ToFloat8ConstrFunc.forward): `role` (events.proto Role) is what its
 * conversions convert; `scale`, when not NULL, its float32 scale on the host
 * (`scale_numel` elements, read during the bracket only). Brackets nest. */
CASTSCOPE_EXPORT void castscope_float8_conversion_begin(int role, const float* scale, unsigned long long scale_numel);
CASTSCOPE_EXPORT void castscope_float8_conversion_end(void);
/* On the calling thread, during a cast castscope's autocast kernel makes: the
 * tensor subclass being cast changed its dtype label and converted no data
 * (torchao's Float8TrainingTensor `autocast_to_copy`). The cast is recorded
 * with outcome RELABELLED. */
CASTSCOPE_EXPORT void castscope_float8_relabelled(void);
/* The precision map's modules (docs/events.md, "Modules and the precision
 * map"): a module's name ("<Root>.qualified.name"), declared once, and each of
 * its parameters by its TensorImpl; both return a scope id (0: refused).
 * enter / exit bracket each module call on the calling thread, its casts and
 * ops carrying the innermost module's id (a weight's cast: its parameter's). */
CASTSCOPE_EXPORT unsigned castscope_module_declare(const char* qualified_name);
CASTSCOPE_EXPORT unsigned castscope_parameter_declare(unsigned module, const char* name, const void* tensor_impl);
CASTSCOPE_EXPORT void castscope_module_enter(unsigned module);
CASTSCOPE_EXPORT void castscope_module_exit(void);
/* The calling thread is inside no module call (an attach starts afresh). */
CASTSCOPE_EXPORT void castscope_module_reset(void);
CASTSCOPE_EXPORT size_t castscope_compile_records(char* buf, size_t len);
CASTSCOPE_EXPORT int castscope_compile_replay(const char* json);
/* Installs the function that returns, while torch.compile traces, the user's
 * line of the FX node being traced (0: none). Set with the location reader. */
CASTSCOPE_EXPORT void castscope_agent_set_tracing_location_reader(unsigned (*reader)(void));
// In a backward on a thread with no user frame (autograd's device threads):
// the user's line of the Python thread waiting for it (0: none, or not one).
CASTSCOPE_EXPORT void castscope_agent_set_backward_caller_reader(unsigned (*reader)(void));

/* At process exit: stops the exporter, writes every buffered event and the
 * final stats; castscope's kernels stay registered (recording off), since
 * other exit handlers may still run ops. */
CASTSCOPE_EXPORT void castscope_agent_finish(void);

#ifdef __cplusplus
}
#endif

#endif /* CASTSCOPE_AGENT_H_ */
