"""The one error type users see.

Anything raised as ``DpconvertError`` is a user-facing problem: the CLI prints
its message as one red line and exits 1. The message must say what is wrong
and the exact fix (a parameter, a file, a value). Parameters are named in
backticks (`batch_size`); ``param`` carries the first of them for tools, and
the CLI renders each as its flag (``cli/flags.py``).
"""

from __future__ import annotations

import re
from typing import Optional

_PARAM = re.compile(r"`([a-z_][a-z0-9_]*)`")


class DpconvertError(Exception):
    """A problem the user can fix; the message names the fix. ``param``: the parameter to change (given, or the first
    one the message names in backticks; None when the fix is not a parameter, e.g. a file to replace)."""

    def __init__(self, message: str = "", *, param: Optional[str] = None) -> None:
        super().__init__(message)
        found = _PARAM.search(str(message))
        self.param = param if param is not None else (found.group(1) if found else None)
