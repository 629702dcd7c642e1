"""Attach castscope right after `import torch` finishes (used by castscope run).

At start-up (sitecustomize), before the job's own code runs, the process
checks what it can without torch (_job_preflight.py): a failed check stops it
with exit status 2. Then a meta-path finder sees the import of `torch`, lets
the normal loader run the module, and attaches with the configuration in
CASTSCOPE_CONFIG. A policy refusal at attach (a check that needs torch's
dispatcher) stops the process the same way. Other failures are reported on
stderr and in CASTSCOPE_STATUS_DIR/refused-<pid>.txt; the job keeps running,
with native autocast.
"""
import importlib.abc
import importlib.machinery
import os
import sys


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # one shot; also keeps the lookup below from recursing
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_then_attach(module):
            run_module(module)
            _attach()

        spec.loader.exec_module = exec_then_attach
        return spec


def _attach():
    from ._native import PolicyRefused

    try:
        from .attachment import _attach_from_environment

        _attach_from_environment()
    except PolicyRefused as e:
        from ._job_preflight import stop_the_job

        stop_the_job([str(e)])
    except Exception as e:  # noqa: BLE001 - the job must not fail because of castscope
        message = f"castscope: not attached in pid {os.getpid()}: {e}"
        print(f"[castscope] {message}", file=sys.stderr)
        status_dir = os.environ.get("CASTSCOPE_STATUS_DIR")
        if status_dir:
            from .private_files import write_private_text

            write_private_text(os.path.join(status_dir, f"refused-{os.getpid()}.txt"), message + "\n")


def _is_the_job() -> bool:
    """This process is the Python command `castscope run` started itself."""
    parent = os.environ.get("CASTSCOPE_RUN_PYTHON_JOB_OF")
    return parent is not None and parent == str(os.getppid())


def install():
    from ._job_preflight import preflight_errors, stop_the_job
    from .config import environment_config

    errors = preflight_errors(environment_config(), _is_the_job())
    if errors:
        stop_the_job(errors)
    if "torch" in sys.modules:
        _attach()
    else:
        sys.meta_path.insert(0, _TorchImportWatcher())
