/* castscope policy lint: the whole public surface of
 * libcastscope_policy_lint.so, which reads policy files without libtorch.
 *
 * `castscope run` loads it before the job starts (a few milliseconds,
 * against seconds for importing torch), and each Python process of the job
 * loads it again at start-up to look up the overlays' modules. The checks
 * that need torch's dispatcher run when the agent attaches (agent.h).
 * No function throws.
 */
#ifndef CASTSCOPE_POLICY_LINT_H_
#define CASTSCOPE_POLICY_LINT_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CASTSCOPE_EXPORT __attribute__((visibility("default")))

/* `request_json` is {"policy_files": ["policies/cpu.json", "overlay.json"]}.
 * Writes a JSON object into buf (NUL-terminated, truncated to len):
 *   {"ok": bool, "errors": ["FILE:LINE: entry ...: why", ...],
 *    "ops_per_device": {"cpu": 126}, "callable_overlays": [...]}
 * Returns the full length, so a caller can retry with a larger buffer. */
CASTSCOPE_EXPORT size_t castscope_policy_lint(const char* request_json, char* buf, size_t len);

/* The torch version the agent beside this library was built against
 * ("2.14.1+cu130"), read from torch's headers at build time. */
CASTSCOPE_EXPORT const char* castscope_policy_lint_torch_version(void);

#ifdef __cplusplus
}
#endif

#endif  // CASTSCOPE_POLICY_LINT_H_
