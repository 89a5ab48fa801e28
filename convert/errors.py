"""The one error type users see.

Anything raised as ``DpconvertError`` is a user-facing problem: the CLI prints
its message as one red line and exits 1. The message must say what is wrong
and the exact fix (a parameter, a file, a value), as "what is wrong; the fix"
or "what is wrong: the fix" (an imperative: give, drop, lower, …), or as a
constraint that is its own fix ("`epochs` must be >= 1"). Parameters are named
in backticks (`batch_size`); ``param`` carries the first of them and ``fix``
the fix, for tools and Python callers, and the CLI renders each parameter as
its flag (``cli/flags.py``).
"""

from __future__ import annotations

import re
from typing import Optional

_PARAM = re.compile(r"`([a-z_][a-z0-9_]*)`")
# the verbs a fix starts with, after "; " or ": " (a clause that starts otherwise describes the problem)
_FIX_VERBS = ("give", "drop", "use", "add", "lower", "raise", "run", "choose", "list", "pass", "declare", "write", "install", "pip",
              "convert", "replace", "remove", "set", "rename", "re-sign", "audit", "train", "export", "fix", "save", "sign", "name",
              "keep", "ask", "call", "make", "put", "retrain", "try", "see", "allow", "shorten", "split", "change", "free", "check", "create")


def derive_fix(message: str) -> Optional[str]:
    """The fix a message states by the convention above; None when it names only the problem (a file to replace)."""
    for clause in re.split(r"(?:; |: |\. )", message)[1:]:  # the first clause after the problem that asks for a change
        if clause.split(" ", 1)[0].lower().strip("(") in _FIX_VERBS:
            return message[message.index(clause):]
    first = message.split(" ", 1)[0].lower()
    if first in _FIX_VERBS or " must " in message or " needs " in message:
        return message  # a request or a constraint is its own fix
    return None


class DpconvertError(Exception):
    """A problem the user can fix; the message names the fix. ``param``: the parameter to change (given, or the first
    one the message names in backticks; None when the fix is not a parameter, e.g. a file to replace). ``fix``: the
    change that resolves it (given, or the message's fix clause: :func:`derive_fix`). ``exit_code``: the CLI's."""

    exit_code = 1

    def __init__(self, message: str = "", *, param: Optional[str] = None, fix: Optional[str] = None) -> None:
        super().__init__(message)
        found = _PARAM.search(str(message))
        self.param = param if param is not None else (found.group(1) if found else None)
        self.fix = fix if fix is not None else derive_fix(str(message))


class InternalError(Exception):
    """A bug in dpconvert, not a problem the user can fix (an invariant that the code, not the input, broke: the spent
    ε differs from the plan's, an input would be answered twice). Deliberately not a ``DpconvertError``: the CLI lets
    its traceback through instead of printing one red line, and no caller can mistake it for bad input."""

    def __init__(self, message: str) -> None:
        super().__init__(f"internal error, a bug in dpconvert (please report it with this traceback): {message}")


class OptionError(DpconvertError, ValueError):
    """A malformed option: a value out of its range, an unknown name or choice, a size that does not parse. A usage
    error: the CLI exits 2, as for an option it cannot parse at all."""

    exit_code = 2
