"""Where castscope's built files are, and the ctypes bindings of
agent/include/castscope/agent.h (loaded once per process, after torch)."""
from __future__ import annotations

import ctypes
import json
import os
import pathlib

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parents[2]  # agent/python/castscope -> the repository (an editable install)


class AttachError(RuntimeError):
    """castscope could not take over autocast; native autocast is untouched."""


class PolicyRefused(AttachError):
    """The policy cannot run here (a policy error, an overlay's module not
    found, an agent built for another torch): `castscope run` stops the job."""


def _find_built(name: str, build_subdir: str, variable: str) -> pathlib.Path:
    """A built file: $variable, next to this package, or in build/; the
    candidates looked at go in the error when none exists."""
    explicit = os.environ.get(variable)
    candidates = [pathlib.Path(explicit)] if explicit else []
    candidates += [_PACKAGE_DIR / name, _REPO_ROOT / "build" / build_subdir / name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"castscope: {name} not found (looked at {', '.join(str(c) for c in candidates)}); "
                            f"build it with scripts/setup.sh or set {variable}")


def _agent_library_path() -> pathlib.Path:
    try:
        return _find_built("libcastscope_agent.so", "agent", "CASTSCOPE_AGENT_LIB")
    except FileNotFoundError as e:
        raise AttachError(str(e)) from None


def agent_library_path() -> pathlib.Path:
    return _agent_library_path()


def collector_binary() -> pathlib.Path:
    """castscope-collector: the daemon, spool loader, query and report tool."""
    return _find_built("castscope-collector", "server", "CASTSCOPE_COLLECTOR_BIN")


def _python_reader_path() -> pathlib.Path | None:
    """The frame reader beside the agent library (the wheel and the build tree put it there)."""
    candidate = _agent_library_path().parent / "libcastscope_python.so"
    return candidate if candidate.is_file() else None


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


def _package_dirs() -> list[str]:
    """castscope's own package as its code objects name it (the path it was
    imported by), and resolved when a symlink makes that differ."""
    named = os.path.dirname(os.path.abspath(__file__)) + os.sep
    resolved = str(_PACKAGE_DIR) + os.sep
    return [named] if named == resolved else [named, resolved]


_lib = None
_reader = None


def _library():
    """libcastscope_agent.so, loaded into this process with its signatures
    declared; raises AttachError when it is not built."""
    global _lib
    if _lib is None:
        import torch  # noqa: F401  (the agent binds to the libtorch already loaded)

        lib = ctypes.CDLL(str(_agent_library_path()))
        lib.castscope_agent_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_agent_start.restype = ctypes.c_int
        lib.castscope_agent_stop.restype = ctypes.c_int
        lib.castscope_agent_flush.restype = ctypes.c_long
        for name in ("castscope_agent_status", "castscope_policy_check"):
            getattr(lib, name).restype = ctypes.c_size_t
        lib.castscope_agent_status.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_policy_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_agent_mark_iteration.restype = None
        lib.castscope_agent_scaler_update.argtypes = [ctypes.c_double, ctypes.c_int, ctypes.c_ulonglong]
        lib.castscope_agent_scaler_update.restype = None
        lib.castscope_agent_cuda_graph_capture.argtypes = [ctypes.c_int]
        lib.castscope_agent_cuda_graph_capture.restype = None
        lib.castscope_agent_set_location_reader.argtypes = [ctypes.c_void_p]
        lib.castscope_agent_set_location_reader.restype = None
        lib.castscope_agent_trace_recording.argtypes = [ctypes.c_int]
        lib.castscope_agent_trace_recording.restype = None
        lib.castscope_agent_gpu_profiler.argtypes = [ctypes.c_int]
        lib.castscope_agent_gpu_profiler.restype = None
        lib.castscope_agent_torch_version.restype = ctypes.c_char_p
        lib.castscope_agent_finish.restype = None
        lib.castscope_overlay_op.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.castscope_overlay_op.restype = ctypes.c_uint
        lib.castscope_overlay_cast.argtypes = [ctypes.c_uint] + [ctypes.c_int] * 8 + [
            ctypes.POINTER(ctypes.c_longlong), ctypes.c_int, ctypes.c_ulonglong]
        lib.castscope_overlay_cast.restype = None
        lib.castscope_overlay_error.argtypes = [ctypes.c_char_p]
        lib.castscope_overlay_error.restype = None
        lib.castscope_compile_epoch.restype = None
        lib.castscope_internal_error.argtypes = [ctypes.c_char_p]
        lib.castscope_internal_error.restype = None
        lib.castscope_compile_collect.argtypes = [ctypes.c_int]
        lib.castscope_compile_collect.restype = None
        lib.castscope_compile_decisions.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_compile_decisions.restype = ctypes.c_size_t
        lib.castscope_compiled_graph.argtypes = [ctypes.c_char_p]
        lib.castscope_compiled_graph.restype = ctypes.c_uint
        lib.castscope_compiled_graph_ran.argtypes = [ctypes.c_uint, ctypes.c_uint]
        lib.castscope_compiled_graph_ran.restype = ctypes.c_uint
        lib.castscope_compiled_graph_running.argtypes = [ctypes.c_int]
        lib.castscope_compiled_graph_running.restype = None
        lib.castscope_own_conversion.argtypes = [ctypes.c_int]
        lib.castscope_own_conversion.restype = None
        lib.castscope_float8_conversion_begin.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulonglong]
        lib.castscope_float8_conversion_begin.restype = None
        lib.castscope_float8_conversion_end.argtypes = []
        lib.castscope_float8_conversion_end.restype = None
        lib.castscope_float8_relabelled.argtypes = []
        lib.castscope_float8_relabelled.restype = None
        lib.castscope_compile_records.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_compile_records.restype = ctypes.c_size_t
        lib.castscope_compile_replay.argtypes = [ctypes.c_char_p]
        lib.castscope_compile_replay.restype = ctypes.c_int
        lib.castscope_agent_set_tracing_location_reader.argtypes = [ctypes.c_void_p]
        lib.castscope_agent_set_tracing_location_reader.restype = None
        lib.castscope_agent_set_backward_caller_reader.argtypes = [ctypes.c_void_p]
        lib.castscope_agent_set_backward_caller_reader.restype = None
        lib.castscope_intern_location.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint, ctypes.c_char_p,
                                                  ctypes.c_char_p]
        lib.castscope_intern_location.restype = ctypes.c_uint
        lib.castscope_source_kind.argtypes = [ctypes.c_char_p]
        lib.castscope_source_kind.restype = ctypes.c_int
        lib.castscope_add_internal_dir.argtypes = [ctypes.c_char_p]
        lib.castscope_add_internal_dir.restype = None
        for directory in _package_dirs():
            lib.castscope_add_internal_dir(directory.encode())
        _install_location_reader(lib)
        _lib = lib
    return _lib


def _install_location_reader(lib) -> None:
    """Source locations for Python processes: a small CPython-aware library
    the agent calls through a function pointer (the agent never links CPython)."""
    global _reader
    path = _python_reader_path()
    if path is None:
        return  # attaching with locations refuses (_location_reader_pointer); the rest works without it
    reader = ctypes.PyDLL(str(path))
    reader.castscope_python_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    reader.castscope_python_init.restype = None
    stacks = os.environ.get("CASTSCOPE_STACKS", "0") not in ("", "0")
    reader.castscope_python_init(ctypes.cast(lib.castscope_intern_library_location, ctypes.c_void_p),
                                 ctypes.cast(lib.castscope_source_kind, ctypes.c_void_p), int(stacks))
    _reader = reader  # keep loaded
    lib.castscope_agent_set_location_reader(ctypes.cast(reader.castscope_python_location, ctypes.c_void_p))
    _set_thread_location_reader(lib, _thread_location_reader_pointer())
    lib.castscope_agent_set_tracing_location_reader(ctypes.cast(reader.castscope_python_tracing_location, ctypes.c_void_p))
    lib.castscope_agent_set_backward_caller_reader(
        ctypes.cast(reader.castscope_python_backward_caller_location, ctypes.c_void_p))


def is_user_file(file: str) -> bool:
    """Whether a Python source file is the user's: the agent's one rule
    (castscope_source_kind, agent/src/record/user_code.h), which the frame
    reader applies too. Not torch's or castscope's, not frozen, generated or
    fileless."""
    return _library().castscope_source_kind(file.encode(errors="surrogateescape")) == 0


def _location_reader_pointer():
    """The Python location reader as a function pointer. Without
    libcastscope_python.so every cast would be recorded at no line and every
    finding raised nowhere: AttachError rather than that, quietly."""
    _library()
    if _reader is None:
        fix = ("copy it from the same build beside that library" if os.environ.get("CASTSCOPE_AGENT_LIB")
               else "build it with scripts/setup.sh (it needs Python's development headers) or reinstall the wheel")
        raise AttachError(f"castscope: libcastscope_python.so (the Python frame reader) not found beside "
                          f"{_agent_library_path()}: {fix}")
    return ctypes.cast(_reader.castscope_python_location, ctypes.c_void_p)


def _thread_location_reader_pointer():
    """The loaded frame reader's entry for the autocast kernels (its state kept
    in the agent's thread block), or None: no reader, or a build without it."""
    entry = getattr(_reader, "castscope_python_location_for", None) if _reader is not None else None
    return ctypes.cast(entry, ctypes.c_void_p) if entry is not None else None


def _set_thread_location_reader(lib, pointer) -> None:
    """Installs `pointer` (or None) as the kernels' reader, on an agent library
    that has the setter (an older build's, compared beside this one by the
    benches, has not: its kernels call the plain reader)."""
    setter = getattr(lib, "castscope_agent_set_thread_location_reader", None)
    if setter is not None:
        setter.argtypes = [ctypes.c_void_p]
        setter.restype = None
        setter(pointer)


def agent_torch_version() -> str:
    """The torch version the agent was built against."""
    return _library().castscope_agent_torch_version().decode()


def _read_json(call) -> dict:
    """Calls a `size_t f(char* buf, size_t len)` of agent.h, growing buf until the JSON fits."""
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = call(buf, size)
        if needed < size:
            return json.loads(buf.value.decode())
        size = needed + 1
