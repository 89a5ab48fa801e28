"""The one error type users see.

Anything raised as ``DpconvertError`` is a user-facing problem: the CLI prints
its message as one red line and exits 1. The message must say what is wrong
and the exact fix (a flag, a file, a value).
"""


class DpconvertError(Exception):
    """A problem the user can fix; the message names the fix."""
