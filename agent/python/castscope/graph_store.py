"""What castscope read of each AOTAutogradCache entry's graphs, kept beside
torch's cache (compile_capture.py): per entry key, the casts registered per
graph ("forward", "backward", "inference") and the COMPILING records the
trace logged (compile_record_replay.h), so that a cache hit, which runs
neither the trace nor the compilers, records what a miss records.

Under inductor's cache directory (TORCHINDUCTOR_CACHE_DIR, or torch's
default), in `castscope/<agent build>/`: the records are the agent library's
own bytes, so each build of it reads only what it wrote. Folders 0700, files
0600, written whole (a temporary file renamed), so a reader never sees half
of one; an entry that cannot be read is no entry (the graphs are traced and
compiled again, and stored anew)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile

_log = logging.getLogger("castscope.compile")
_KEY = re.compile(r"[A-Za-z0-9_-]{1,200}")  # AOTAutogradCache's keys ("a" + base32): a file name, never a path
_KINDS = ("forward", "backward", "inference")


class GraphStore:
    def __init__(self, lib):
        self._lib = lib
        self._folder: str | None = None

    def folder(self) -> str:
        if self._folder is None:
            from torch._inductor.runtime.cache_dir_utils import cache_dir

            digest = hashlib.sha256()
            with open(self._lib._name, "rb") as library:  # the agent library ctypes loaded
                for chunk in iter(lambda: library.read(1 << 20), b""):
                    digest.update(chunk)
            self._folder = os.path.join(cache_dir(), "castscope", digest.hexdigest()[:24])
        return self._folder

    def path(self, key: str) -> str | None:
        return os.path.join(self.folder(), key + ".json") if isinstance(key, str) and _KEY.fullmatch(key) else None

    def read(self, key: str) -> dict | None:
        """The entry stored for `key`, or None (none, or not one this module wrote)."""
        path = self.path(key)
        if path is None:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                stored = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            _log.info("castscope's record of AOTAutogradCache entry %s is unreadable (%s): compiling it again", key, e)
            return None
        if not isinstance(stored, dict):
            stored = {}
        graphs = stored.get("graphs")
        if not (isinstance(stored.get("records"), list) and isinstance(graphs, dict) and graphs
                and all(kind in _KINDS and isinstance(casts, list) for kind, casts in graphs.items())):
            _log.info("castscope's record of AOTAutogradCache entry %s is malformed: compiling it again", key)
            return None
        return stored

    def write(self, key: str, stored: dict) -> None:
        path = self.path(key)
        if path is None:
            return
        folder = os.path.dirname(path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".writing-")  # 0600
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                json.dump({"records": stored["records"], "graphs": stored["graphs"]}, f)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
