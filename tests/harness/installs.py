"""One install at a time: the npm installs under `.cache/` are shared by the pytest-xdist workers
of a run (and by the worktrees whose `.cache` is the same folder), and two `npm install --prefix`
into one folder at once break each other's."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock (fcntl, released when the process dies) on `folder`'s lock file
    (`<folder>.lock` beside it) while installing into `folder`; others wait for it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
