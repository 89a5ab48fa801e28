"""Commands built from the options classes: each option's flag, help, panel and default come from its declaration
(``dpconvert/option_fields.py``), so the CLI cannot drift from the library.

A command is a list of :class:`Param`: generated ones (:func:`params_of`, one per option, merged across methods
when several methods have an option of the same name: ``--clip`` is DPDFD's row norm and DP-SGD's gradient bound,
one flag whose help gives each method's meaning and default) and the command's own (:func:`own`: the teacher
argument, ``--out``, ``--json``, …). :func:`build` turns them into the ``inspect.Signature`` Typer reads.
Every generated option defaults to ``None`` on the command line (a flag to ``False``), so the command passes on only
what the user gave and the library fills in its defaults.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from dpconvert.option_fields import OptionSpec, option_specs

from .flags import as_flags


@dataclass
class Param:
    """One command-line parameter: generated from option declarations (``specs``, one per class that has it) or the
    command's own (``specs`` empty)."""

    name: str
    flags: tuple
    type: type
    help: str
    panel: Optional[str] = None
    default: Any = None
    hidden: bool = False
    argument: bool = False
    specs: list = field(default_factory=list)
    classes: tuple = ()  # the options classes it was generated from (top level: RunOptions, DpdfdOptions, …)

    def value(self, text):
        """The value the library receives: parsed by the declaration's ``parse`` (sizes, lists)."""
        parse = next((s.parse for s in self.specs if s.parse), None)
        return parse(text) if parse is not None and isinstance(text, str) else text


def own(name: str, *flags: str, type: type = str, help: str, panel: Optional[str] = None, default: Any = None, hidden: bool = False,
        argument: bool = False) -> Param:
    """A parameter of the command itself (not a library option): its help is written here."""
    return Param(name, flags or ("--" + name.replace("_", "-"),), type, help, panel, default, hidden, argument)


def _owner_label(cls: type) -> str:
    """"dpdfd" for DpdfdOptions: the method whose options these are (for merged help), else the class's panel."""
    from dpconvert.methods import METHODS

    for name in METHODS:
        if METHODS.get(name).Options is cls:
            return name
    return getattr(cls, "PANEL", cls.__name__)


def _help(spec: OptionSpec) -> str:
    shown = spec.default_shown()
    return spec.help + (f" Default: {shown}." if shown else "")


def params_of(*classes: type, only: Optional[set] = None, skip: frozenset = frozenset(), plan_only: bool = False,
              panel: Optional[str] = None, prefix: str = "") -> list[Param]:
    """One Param per command-line option of ``classes`` (``cli=True``), merged by name across classes. ``only``/``skip``:
    names to keep/drop; ``plan_only``: options that do not change the privacy plan are accepted but hidden from help;
    ``panel``: one panel for all (else each declaration's); ``prefix``: names as where the class is nested (``gan_``)."""
    merged: dict[str, list[OptionSpec]] = {}
    roots: dict[str, list[type]] = {}
    for cls in classes:
        for spec in option_specs(cls, prefix):
            if spec.cli and (only is None or spec.name in only) and spec.name not in skip:
                merged.setdefault(spec.name, []).append(spec)
                roots.setdefault(spec.name, []).append(cls)
    params = []
    for name, specs in merged.items():
        first = specs[0]
        types = {s.type for s in specs}
        if len(types) > 1:
            raise TypeError(f"option {name} has different types in {[s.owner.__name__ for s in specs]}: {types}")
        if len({s.flag for s in specs}) > 1:
            raise TypeError(f"option {name} has different flags in {[s.owner.__name__ for s in specs]}")
        meanings = list(dict.fromkeys((_owner_label(s.owner), _help(s)) for s in specs))  # one nested class in two methods: once
        if len({h for _, h in meanings}) == 1:
            text = _help(first)
        else:  # the same concept in several methods: each one's meaning and default
            text = " ".join(f"{label}: {h}" for label, h in meanings)
        is_flag = first.is_flag
        params.append(Param(
            name=name, flags=("--" + first.flag.replace("_", "-"),),
            type=bool if is_flag else (str if first.parse or first.type not in (int, float, str) else first.type),
            help=as_flags(text), panel=panel or first.panel, default=False if is_flag and not first.negatable else None,
            hidden=plan_only and not any(s.plan for s in specs), specs=specs, classes=tuple(roots[name])))
    return params


METAVARS = {int: "INT", float: "NUM", str: "TEXT", Path: "PATH"}  # what the help shows for a value (not <str>, <list[str]>)


def annotation(p: Param):
    """The ``Annotated[type, typer.Option(...)]`` Typer reads for ``p``."""
    from rich.markup import escape

    text = escape(p.help)  # help is plain text: [@FILE] is not rich markup
    if p.argument:
        info = typer.Argument(help=text, show_default=False, metavar=p.name.upper())
    else:
        # a flag whose default the library picks (None) also has its --no- form
        flags = [f"{p.flags[0]}/--no-{p.flags[0][2:]}", *p.flags[1:]] if p.type is bool and p.default is None else p.flags
        info = typer.Option(*flags, help=text, rich_help_panel=as_flags(p.panel) if p.panel else None, hidden=p.hidden,
                            show_default=False, metavar=None if p.type is bool else METAVARS.get(p.type, "TEXT"))
    tp = p.type if p.argument or p.default is not None else Optional[p.type]  # on/off flags default to False
    return Annotated[tp, info]


def option_annotation(cls: type, name: str, **changes):
    """The annotation of one declared option, for a hand-written command (``inspect``, ``audit``)."""
    [p] = params_of(cls, only={name})
    for k, v in changes.items():
        setattr(p, k, v)
    return annotation(p)


def retitled(params: list[Param], name: str, *, help: Optional[str] = None, default_text: Optional[str] = None, required: bool = False,
             default: Any = None) -> None:
    """Adapt one generated parameter to a command: its own help or shown default, required, or a default of its own."""
    p = next(p for p in params if p.name == name)
    if help is not None:
        p.help = as_flags(help)
    elif default_text is not None:
        p.help = as_flags(p.specs[0].help + f" Default: {default_text}.")
    if required:
        p.default = ...
    elif default is not None:
        p.default = default


def build(app: typer.Typer, name: str, params: list[Param], body: Callable[[dict], None], doc: str, **command_kwargs) -> None:
    """Register command ``name`` on ``app``: Typer reads the generated signature; ``body`` receives {param name: value}."""
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise TypeError(f"command {name}: a parameter is declared twice: {sorted(n for n in names if names.count(n) > 1)}")
    parameters, annotations = [], {}
    for p in params:
        default = inspect.Parameter.empty if p.default is ... else p.default
        parameters.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation(p)))
        annotations[p.name] = annotation(p)

    def command(**values) -> None:
        body(values)

    command.__signature__ = inspect.Signature(parameters)
    command.__annotations__ = annotations
    command.__doc__ = doc
    command.__name__ = name.replace("-", "_")
    app.command(name, **command_kwargs)(command)


def given(params: list[Param], values: dict, *classes: type) -> dict:
    """The generated options of ``classes`` the user gave: {flat name: parsed value}."""
    out = {}
    for p in params:
        if not p.specs or not set(p.classes) & set(classes):
            continue
        v = values.get(p.name)
        if v is None or (p.type is bool and v is False and p.default is False):  # --no-x of a negatable flag is given
            continue
        out[p.name] = p.value(v)
    return out
