"""The one error type users see, and the one for bugs.

Anything raised as ``DpconvertError`` is a user-facing problem: the CLI prints
its message as one red line and exits 1. Each error states, as separate
fields, what is wrong (``problem``), the change that resolves it (``fix``: an
imperative — give, drop, lower — or a rule that is its own fix, "`epochs` must
be >= 1") and the parameter to change (``param``); the message is
"problem; fix". Parameters are named in backticks (`batch_size`), and the CLI
renders each as its flag (``cli/flags.py``). Tools and Python callers read the
fields; nothing is parsed back out of the prose.
"""

from __future__ import annotations

from typing import Optional


class DpconvertError(Exception):
    """A problem the user can fix. ``problem``: what is wrong. ``fix``: the change that resolves it (None where no input
    to dpconvert changes it: a corrupt card, a file to replace). ``param``: the parameter to change, as the message names
    it in backticks (None when the fix is no parameter). ``exit_code``: the CLI's."""

    exit_code = 1

    def __init__(self, problem: str = "", *, fix: Optional[str] = None, param: Optional[str] = None) -> None:
        if not (problem or fix):
            raise TypeError("an error states its problem, its fix, or both")
        self.problem, self.fix, self.param = problem, fix, param
        super().__init__("; ".join(part for part in (problem, fix) if part))

    def __reduce__(self):  # keyword-only fields: rebuild from them, not from the message (multiprocessing, pickling)
        return _rebuild, (type(self), self.problem, self.fix, self.param)


def _rebuild(cls, problem, fix, param):
    return cls(problem, fix=fix, param=param)


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
