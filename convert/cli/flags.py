"""Library parameters → this CLI's flags. The library names parameters in backticks (`batch_size`); everything the CLI
prints (errors, warnings, audit reasons) shows them as the flags a user types (--batch-size)."""

from __future__ import annotations

import re

# Library parameter → CLI flag, where the flag is not the parameter with dashes.
FLAG_OF = {"releases": "--steps", "method_options": "the method's options", "out": "--out"}


def flag(param: str) -> str:
    return FLAG_OF.get(param, "--" + param.replace("_", "-"))


def as_flags(message: str) -> str:
    """`batch_size` → --batch-size in a library error message."""
    return re.sub(r"`([a-z_0-9]+)`", lambda m: flag(m.group(1)), message)
