"""Options declared once: each option is a dataclass field whose metadata carries its help, its panel and how it is
named on a command line, so that the CLI's commands are generated from the options classes (``cli/generated.py``)
and their help, defaults and validation cannot drift apart (the way ``transformers``' ``HfArgumentParser`` builds
arguments from dataclass fields).

    @dataclass
    class DpdfdOptions:
        PANEL: ClassVar[str] = "DPDFD (data-free, query-level)"
        releases: int = option(1, help="Noisy releases T.", flag="steps", plan=True)

Help texts name other parameters in backticks (`batch_size`); the CLI renders them as its flags. A field whose
default is ``None`` because the library picks it (from the input size, the device, …) says so in ``default_text``.
A field that holds another options class (``nested``) contributes that class's options under a prefix
(Private-kNN's ``gan``: ``gan_critic``, ``gan_steps``, …), and :func:`from_flat` builds it back from flat names.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Optional

from .errors import OptionError

# panels of the options every conversion takes (methods name their own in a PANEL class attribute)
TEACHER, PRIVACY, DATA, OUTPUT = "Teacher", "Privacy", "Data", "Output"


def option(default: Any = MISSING, *, help: str, panel: Optional[str] = None, flag: Optional[str] = None,
           default_text: Optional[str] = None, parse: Optional[Callable[[str], Any]] = None, plan: bool = False,
           cli: bool = True, choices: Optional[tuple] = None, only_with: Optional[tuple] = None, default_factory: Any = MISSING):
    """A dataclass field with what a command line needs to offer it.

    ``flag``: the name on the command line when it is not the field's (``releases`` → ``steps``).
    ``parse``: turns the command line's text into the field's value (sizes, lists). ``plan``: the option changes
    the privacy plan (``dpconvert plan`` shows it in its help; it accepts every option). ``cli=False``: Python only
    (engine internals whose defaults were measured; the CLI does not offer them). ``choices``: the values it takes
    (listed in the help and checked by :func:`check_choices`). ``only_with``: (other field, value) — the option
    configures only that choice (a GAN critic's own settings), and :func:`check_choices` refuses it changed otherwise.
    """
    meta = {"help": help, "panel": panel, "flag": flag, "default_text": default_text, "parse": parse,
            "plan": plan, "cli": cli, "choices": choices, "only_with": only_with}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def nested(cls: type, *, prefix: str, help: str, panel: Optional[str] = None, cli: bool = True):
    """A field holding another options class; its options appear flat as ``{prefix}_{name}``, in ``panel`` (default:
    the nested class's own PANEL)."""
    return field(default_factory=cls, metadata={"help": help, "nested": cls, "prefix": prefix, "panel": panel, "cli": cli})


@dataclass(frozen=True)
class OptionSpec:
    """One option as a command line sees it: ``name`` is its flat parameter name (``gan_critic``), ``path`` the fields
    that lead to it from the top options class (``("gan", "critic")``)."""

    name: str
    path: tuple
    owner: type
    type: type  # the value's type without Optional (int, float, str, bool, tuple, …)
    default: Any  # the dataclass default (MISSING when it has none); None when the library picks it
    help: str
    panel: str
    flag: str
    default_text: Optional[str]
    parse: Optional[Callable[[str], Any]]
    plan: bool
    cli: bool
    choices: Optional[tuple]
    only_with: Optional[tuple]

    @property
    def is_flag(self) -> bool:
        return self.type is bool

    @property
    def negatable(self) -> bool:
        """A flag whose default the library picks (None): ``--x`` turns it on and ``--no-x`` off."""
        return self.is_flag and self.default is None

    def default_shown(self) -> Optional[str]:
        """The default as the help shows it: a number or a name, or what the library picks it from; None for an
        on/off flag (off unless given)."""
        if self.is_flag and not self.negatable:
            return None
        if self.default_text:
            return self.default_text
        if self.default is None or self.default is MISSING:
            return None
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)


def _unwrap_optional(tp):
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def option_specs(cls: type, prefix: str = "", path: tuple = (), panel: Optional[str] = None) -> list[OptionSpec]:
    """Every option of ``cls`` (nested classes flattened under their prefix), in declaration order."""
    hints = typing.get_type_hints(cls)
    panel = panel or getattr(cls, "PANEL", None) or cls.__name__
    specs = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        meta = f.metadata
        if "help" not in meta:
            raise TypeError(f"{cls.__name__}.{f.name} has no help: declare it with dpconvert.option_fields.option")
        if "nested" in meta:
            sub_prefix = f"{prefix}{meta['prefix']}_"
            specs += [dataclasses.replace(s, cli=s.cli and meta["cli"]) for s in
                      option_specs(meta["nested"], sub_prefix, path + (f.name,), meta["panel"])]
            continue
        name = prefix + f.name
        default = f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING else MISSING)
        tp = _unwrap_optional(hints[f.name])
        tp = typing.get_origin(tp) or tp  # tuple[int, …] → tuple
        specs.append(OptionSpec(name=name, path=path + (f.name,), owner=cls, type=tp, default=default, help=meta["help"],
                                panel=meta["panel"] or panel, flag=prefix + (meta["flag"] or f.name),
                                default_text=meta["default_text"], parse=meta["parse"], plan=meta["plan"], cli=meta["cli"],
                                choices=meta["choices"], only_with=meta["only_with"]))
    return specs


def option_names(cls: type) -> set[str]:
    """The names ``cls`` takes from :func:`from_flat`: every flat option name, and each nested field's own name."""
    return {s.name for s in option_specs(cls)} | {f.name for f in dataclasses.fields(cls) if f.init}


def from_flat(cls: type, values: dict, *, param_prefix: str = ""):
    """An instance of ``cls`` from flat option names (``gan_critic`` → ``gan=GanOptions(critic=…)``); a nested field may
    also be given whole (an instance or a dict of its own names). Unknown names are left to the caller: this returns
    (instance, names it did not take)."""
    values = dict(values)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if "nested" in f.metadata:
            sub_cls, prefix = f.metadata["nested"], f.metadata["prefix"]
            whole = values.pop(f.name, None)
            base = dataclasses.asdict(whole) if dataclasses.is_dataclass(whole) else dict(whole or {})
            own = {n.name for n in dataclasses.fields(sub_cls)}
            flat = {k[len(prefix) + 1:]: values.pop(k) for k in list(values) if k.startswith(prefix + "_") and k[len(prefix) + 1:] in own}
            if flat or whole is not None:
                kwargs[f.name] = sub_cls(**{**base, **flat})
        elif f.name in values:
            kwargs[f.name] = values.pop(f.name)
    try:
        return cls(**kwargs), values
    except TypeError as e:  # a dict given for a nested class with an unknown key
        raise OptionError(f"{param_prefix or cls.__name__}: {e}", fix="give only the option names it declares") from None


def to_flat(obj) -> dict:
    """The inverse of :func:`from_flat`: flat option name → value (for cards and round trips)."""
    flat = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        if "nested" in f.metadata:
            flat.update({f"{f.metadata['prefix']}_{k}": v for k, v in to_flat(value).items()})
        else:
            flat[f.name] = value
    return flat


def changed_options(obj) -> list[str]:
    """Flat names of the options of ``obj`` that differ from the class defaults."""
    default = to_flat(type(obj)())
    return [k for k, v in to_flat(obj).items() if v != default[k]]


def check_ranges(rules) -> None:
    """An options class's value checks, as ``(holds, param, rule)``: the first that fails is an :class:`OptionError`
    whose fix is the rule (``(self.k >= 1, "k", "must be >= 1")`` → "`k` must be >= 1")."""
    for holds, param, rule in rules:
        if not holds:
            raise OptionError(fix=f"`{param}` {rule}", param=param)


def check_choices(obj, prefix: str = "") -> None:
    """The checks the declarations imply: a value among its ``choices``; an ``only_with`` option left at its default
    unless its choice is made. ``prefix``: how the options are named where ``obj`` is nested (``gan_``)."""
    for f in dataclasses.fields(obj):
        meta, value = f.metadata, getattr(obj, f.name)
        if meta.get("choices") and value is not None and value not in meta["choices"]:
            raise OptionError(f"unknown `{prefix}{f.name}` {value!r}", fix=f"choose one of: {', '.join(map(str, meta['choices']))}",
                              param=prefix + f.name)
        if meta.get("only_with") and value != f.default:
            other, wanted = meta["only_with"]
            if getattr(obj, other) != wanted:
                raise OptionError(f"`{prefix}{f.name}` configures `{prefix}{other}` {wanted}, not {getattr(obj, other)}",
                                     fix=f"drop it or choose `{prefix}{other}` {wanted}", param=prefix + f.name)
