"""Outputs that cannot be lost: checked before the long work, written all or nothing.

``check_output`` runs before any teacher is queried or any private data is read: the folder exists, a file can be
created in it (a probe file, created and removed), the path is not a folder, and an existing output is replaced only
when the user said so (``force``). ``AtomicOutputs`` writes every file to a temp name registered *before* it is
created, then renames them all; a crash, Ctrl-C or a full disk before ``commit`` leaves no output file and no temp
file, and an ``OSError`` becomes one ``DpconvertError`` line naming the path. A rename is atomic on one file system.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import Iterable

from dpconvert.errors import DpconvertError


def _why(e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"{e.strerror or 'no space left'}: free space or choose another folder"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{e.strerror or 'not writable'}: choose a folder you can write to"
    return e.strerror or str(e)


def check_output(path: str | Path, *, param: str = "out", force: bool = False, also: Iterable[Path] = ()) -> Path:
    """Refuse an output that could not be written, before the work starts. ``also``: files written beside it
    (sidecar cards) that count as this output when deciding whether something would be replaced."""
    path = Path(path)
    if path.is_dir():
        raise DpconvertError(f"`{param}` {path} is a folder", fix="give a file name inside it", param=param)
    parent = path.parent
    if not parent.is_dir():
        raise DpconvertError(f"the folder {parent} of `{param}` does not exist", fix=f"create it or choose another `{param}`", param=param)
    existing = [p for p in (path, *also) if p.exists()]
    if existing and not force:
        raise DpconvertError(f"{existing[0]} exists", fix=f"give `force` to replace it, or choose another `{param}`", param="force")
    probe = parent / f".{path.name}.{secrets.token_hex(4)}.probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise DpconvertError(f"cannot write `{param}` in {parent} ({_why(e)})", fix="choose a writable folder", param=param) from None
    return path


class AtomicOutputs:
    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def write(self, path: str | Path, data: bytes | str) -> None:
        path = Path(path)
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        self._pending.append((tmp, path))  # registered before it exists: discard() removes it whatever happens next
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
        except OSError as e:
            raise DpconvertError(f"cannot write {path} ({_why(e)}); nothing was written") from None

    def commit(self) -> None:
        try:
            for tmp, final in self._pending:
                os.replace(tmp, final)
        except OSError as e:
            self.discard()
            raise DpconvertError(f"cannot write {final} ({_why(e)})") from None
        self._pending.clear()

    def discard(self) -> None:
        for tmp, _ in self._pending:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        self._pending.clear()

    def __enter__(self) -> "AtomicOutputs":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()
