"""Durable writes: what survives a crash or a SIGKILL at any instant.

Why one module: the journal, the pool file, the simulator's state, baselines and reports all
promise "the old file or the new one, never half of either"; that takes a temp file in the same
folder, an fsync, a rename and an fsync of the folder, and one copy of it is easier to trust.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a rename or a file creation in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Temp file, fsync, rename, fsync of the folder: a crash leaves the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
