"""The command line that reproduces a conversion started from Python, for the card's ``command`` field.

A card says how its model was made; for a conversion started from the CLI that is the command the user typed, and
for one started from Python (``dpconvert.convert(...)``) it is the equivalent ``dpconvert`` command: the teacher,
``out`` and every option that differs from its default (``option_fields.changed_options``: a δ the method ties to
its units is a default, not an option), spelled as each option's declared flag (``releases`` is ``steps`` on the
command line). Private paths stay as given (the card's ``command`` is the user's to redact).
"""

from __future__ import annotations

import shlex
from typing import Iterable, Optional

from .option_fields import changed_options, option_specs, to_flat


def equivalent_command(teachers: Iterable[str], out: str, *options) -> str:
    """``dpconvert TEACHER… <out flag> OUT`` plus every non-default option of the option objects given (RunOptions,
    LoadOptions, the method's options), in declaration order."""
    words = ["dpconvert", *map(str, teachers), _flag("out"), str(out)]
    for obj in options:
        if obj is not None:
            words += _changed(obj)
    return " ".join(shlex.quote(w) for w in words)


def _flag(name: str) -> str:
    return "-" * 2 + name.replace("_", "-")


def _changed(obj) -> list[str]:
    specs = {s.name: s for s in option_specs(type(obj)) if s.cli}
    values = to_flat(obj)
    words = []
    for name in changed_options(obj):
        spec, value = specs.get(name), values[name]
        if spec is None or value is None:
            continue
        if spec.is_flag:
            words += [_flag(spec.flag) if value else _flag("no_" + spec.flag)] if value or spec.negatable else []
        else:
            words += [_flag(spec.flag), _text(value)]
    return words


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
    return equivalent_command(teachers, out, run, load_opts, method_opts)
