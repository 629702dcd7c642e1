"""Files castscope writes for a job are private (0600) whatever the umask:
events, reports and logs name the user's source files, lines and tensor
shapes. The native parts do the same (docs/operations.md)."""
from __future__ import annotations

import os
import pathlib
import tempfile


def write_private_text(path: str | os.PathLike, text: str) -> None:
    """Writes `text` to `path`, mode 0600: written whole to a private file
    beside it and renamed into place, so a reader never sees half of it and
    a file left by an earlier run with another mode is replaced, not reused."""
    path = pathlib.Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise


def open_private_append(path: str | os.PathLike):
    """`path` opened for appending bytes (a log), created 0600."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600), "ab")
