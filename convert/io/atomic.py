"""All-or-nothing output: every file is written to a temp name, then all are renamed.

A crash or Ctrl-C before ``commit`` leaves no output file (temps are removed);
a rename is atomic on one file system.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class AtomicOutputs:
    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def write(self, path: str | Path, data: bytes | str) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        self._pending.append((Path(tmp), path))

    def commit(self) -> None:
        for tmp, final in self._pending:
            os.replace(tmp, final)
        self._pending.clear()

    def discard(self) -> None:
        for tmp, _ in self._pending:
            tmp.unlink(missing_ok=True)
        self._pending.clear()

    def __enter__(self) -> "AtomicOutputs":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()
