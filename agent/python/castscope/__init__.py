"""castscope: see what autocast did to your job.

    import torch, castscope
    with castscope.attached(events_path="casts.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    print(agent.summary())

`attach()` loads libcastscope_agent.so into this interpreter (after torch),
registers castscope's autocast kernels from the policy files, and records one
event per autocast decision. `detach()` hands autocast back to torch.

Modules: `_native` (built files, ctypes bindings), `config` (agent
configuration, shipped policies), `attachment` (attach/detach), `policy`
(policy_check), `events` (event files), `report` (audit reports, diffs),
`embedded_collector` (a collector beside a job), `private_files` (0600 files), `cli`
(the `castscope` command), `pytest` (the pytest plugin, docs/pytest.md) and
`attribution` (findings to tests).

PYTEST_DONT_REWRITE: under `castscope run -- pytest` this package is imported
before pytest starts; pytest, finding it registers a plugin, would warn that it
cannot rewrite its asserts (it has none to rewrite).
"""
from ._native import AttachError, agent_library_path, collector_binary
from .attachment import Agent, attach, attached, detach
from .config import default_policy_files, policies_dir
from .events import EventFileError, iter_events, read_events, summarize
from .policy import policy_check

__all__ = ["EventFileError", "iter_events", "summarize", "agent_library_path", "collector_binary", "Agent", "AttachError",
           "attach", "attached", "detach", "default_policy_files", "policies_dir", "policy_check", "read_events"]
