"""``dpconvert inspect``: load a teacher and say what was loaded."""

from __future__ import annotations

import json
from .app import app
from .console import err, out
from .generated import build, given, own, params_of


def _inspect_params() -> list:
    from dpconvert.io.teachers import LoadOptions

    return [own("teacher", argument=True, default=..., help="Teacher: a file (.pt/.pth/.pt2/.safetensors/.onnx), timm:NAME or builtin:NAME."),
            *params_of(LoadOptions, skip=frozenset({"device", "teacher_runtime"})),
            own("as_json", "--json", type=bool, default=False, help="Print JSON (keys documented in the README).")]


INSPECT = _inspect_params()


def _inspect(values: dict) -> None:
    """Load a teacher and print what was loaded (source kind, architecture, input spec, sha256)."""
    from rich.table import Table

    from dpconvert.io.teachers import LoadOptions, load_teacher

    teacher = values["teacher"]
    t = load_teacher(teacher, LoadOptions(**given(INSPECT, values, LoadOptions)))
    if values["as_json"]:
        print(json.dumps(t.info(), indent=2))
        return
    from rich.text import Text

    from .flags import as_flags

    table = Table(title=f"teacher {teacher}", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # a hash folds whole onto the next line instead of being cut with …
    s = t.spec
    for k, v in [("source kind", t.kind), ("architecture", str(t.arch)),
                 ("parameters", f"{t.num_params:,}" if t.num_params is not None else "n/a (black box)"),
                 ("input", f"{s.channels}x{s.height}x{s.width}  mean={list(s.mean)} std={list(s.std)}"), ("classes", str(s.num_classes)),
                 ("sha256", str(t.sha256)), ("weights sha256", str(t.weights_sha256)), ("description", t.description)]:
        table.add_row(k, v)
    out.print(table)
    for w in t.warnings:  # wrapped at words, parameters as the flags a user types
        err.print(Text(f"warning: {as_flags(w)}", style="yellow"), soft_wrap=False)


build(app, "inspect", INSPECT, _inspect, _inspect.__doc__)
