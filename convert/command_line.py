"""The command line that reproduces a conversion started from Python, for the card's ``command`` field.

A card says how its model was made; for a conversion started from the CLI that is the command the user typed, and
for one started from Python (``dpconvert.convert(...)``) it is the equivalent ``dpconvert`` command: the teacher,
``out`` and every option that differs from its default, spelled as each option's declared flag (``releases`` is
``steps`` on the command line). Private paths stay as given (the card's ``command`` is the user's to redact).
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Iterable, Optional

from .option_fields import option_specs, to_flat


def equivalent_command(teachers: Iterable[str], out: str, *options, skip: frozenset = frozenset()) -> str:
    """``dpconvert TEACHER… <out flag> OUT`` plus every non-default option of the option objects given (RunOptions,
    LoadOptions, the method's options), in declaration order; ``skip``: names resolved by the library, not given."""
    words = ["dpconvert", *map(str, teachers), _flag("out"), str(out)]
    for obj in options:
        if obj is None:
            continue
        words += _changed(obj, skip)
    return " ".join(shlex.quote(w) for w in words)


def _flag(name: str) -> str:
    return "-" * 2 + name.replace("_", "-")


def _changed(obj, skip: frozenset = frozenset()) -> list[str]:
    specs = {s.name: s for s in option_specs(type(obj)) if s.cli}
    default = _defaults(type(obj))
    words = []
    for name, value in to_flat(obj).items():
        spec = specs.get(name)
        if spec is None or value is None or name in skip or (name in default and value == default[name]):
            continue
        if spec.is_flag:
            words += [_flag(spec.flag)] if value else []
        else:
            words += [_flag(spec.flag), _text(value)]
    return words


def _defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if "nested" in f.metadata:
            out.update({f"{f.metadata['prefix']}_{k}": v for k, v in _defaults(f.metadata["nested"]).items()})
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _text(value) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def command_for(teacher_source, out, run, method_opts, load_opts: Optional[object] = None) -> str:
    """The card's ``command``: what the user typed, or the equivalent command of a Python call."""
    if run.command:
        return run.command
    teachers = [teacher_source] if isinstance(teacher_source, str) else list(teacher_source)
    skip = frozenset({"delta"} if run.delta_is_default else ())  # a δ the method ties to its units, not one the user gave
    return equivalent_command(teachers, out, run, load_opts, method_opts, skip=skip)
