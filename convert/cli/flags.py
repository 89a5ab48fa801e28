"""Library parameters → this CLI's flags. The library names parameters in backticks (`batch_size`); everything the CLI
prints (errors, warnings, audit reasons) shows them as the flags a user types (--batch-size)."""

from __future__ import annotations

import functools
import re

# Library parameters that are no option (the options' own flags come from their declarations: `releases` → --steps)
NOT_OPTIONS = {"method_options": "the method's options", "out": "--out"}


@functools.lru_cache(maxsize=1)
def _flag_of() -> dict:
    """Every declared option whose flag is not its name with dashes (``option(flag=…)``)."""
    from dpconvert.io.teachers import LoadOptions
    from dpconvert.methods import METHODS
    from dpconvert.option_fields import option_specs
    from dpconvert.options import RunOptions

    specs = [s for cls in (RunOptions, LoadOptions, *(METHODS.get(m).Options for m in METHODS)) for s in option_specs(cls)]
    return {**{s.name: "--" + s.flag.replace("_", "-") for s in specs if s.flag != s.name}, **NOT_OPTIONS}


def flag(param: str) -> str:
    return _flag_of().get(param, "--" + param.replace("_", "-"))


def as_flags(message: str) -> str:
    """`batch_size` → --batch-size in a library error message."""
    return re.sub(r"`([a-z_0-9]+)`", lambda m: flag(m.group(1)), message)
