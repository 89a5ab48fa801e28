"""The ``dpconvert`` command line: the Typer app, the options several commands share, and the entry point. Each
command group lives in its own module (``*_cmd.py``), registered on ``app`` when ``dpconvert.cli`` is imported.

Options left out are passed as ``None`` and the library fills in its defaults (``options.py``,
``methods/*.py``). Library errors name parameters in backticks (`batch_size`); ``main`` turns them into this CLI's
flags (``--batch-size``). Heavy imports (torch, timm, onnx) happen inside commands so ``dpconvert --help`` is
instant. Every ``DpconvertError`` becomes one red line and exit code 1; usage errors (``OptionError`` too) exit 2.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dpconvert.errors import DpconvertError
from dpconvert.version import __version__

from .console import err, out, setup_logging
from .flags import as_flags


def _no_type_on_flags() -> None:
    """Typer's help prints a type for every option, ``<bool>`` on flags too, which reads as if a value were expected;
    a flag's type is its presence, so it shows none."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_dpconvert", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich._dpconvert = True
    TyperOption.display_type_rich = display_type_rich


def _plain_arguments() -> None:
    """Typer prints a required argument as ``{TEACHER}...`` in the usage line and its Python type (``<list[str]>``) in
    the help; the help already says what TEACHER is, so the usage reads ``TEACHER...`` (``[NAME]`` when optional, names in
    capitals, as click writes them) and the type column stays empty."""
    from typer.core import TyperArgument

    if getattr(TyperArgument._usage_display_name, "_dpconvert", False):
        return

    def usage_name(self):
        name = self.display_name_raw
        return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")

    def no_type(self, ctx):
        return None

    usage_name._dpconvert = True
    TyperArgument._usage_display_name = usage_name
    TyperArgument.display_name_raw = property(lambda self: (self.metavar or self.name).upper())
    TyperArgument.display_type_rich = no_type


_no_type_on_flags()
_plain_arguments()

app = typer.Typer(
    name="dpconvert",
    help="Convert a sensitive image classifier into a differentially private student, with a privacy card.\n\n"
    "Main form: dpconvert TEACHER --eps 1 --out student.onnx (TEACHER: a file, timm:NAME or builtin:digits).",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,  # locals may hold private data
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
)
card_app = typer.Typer(help="Show, verify or sign one privacy card; make signing keys.", no_args_is_help=True)
app.add_typer(card_app, name="card")



def method_help(auto: bool = True) -> str:
    """The --method help, from the method registry (each method's one-line summary)."""
    from dpconvert.methods import METHODS, method_order

    listed = "; ".join(f"{name}: {METHODS.get(name).summary}" for name in method_order())
    return listed + ("; auto (default): DP-SGD with --private-data, DPDFD otherwise." if auto else ".")

def _exit_usage(message: str) -> None:
    err.print(f"error: {as_flags(message)}", style="bold red", markup=False)
    raise typer.Exit(2)


def _version_callback(value: bool) -> None:
    if value:
        out.print(f"dpconvert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More log lines (anywhere on the command line).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings, errors and the result: no plan, no progress (anywhere on the "
                                        "command line).")] = False,
) -> None:
    from . import console

    console.QUIET = quiet
    setup_logging(verbose, quiet)


# ------------------------------------------------------------------ entry point
KNOWN_COMMANDS = {"inspect", "plan", "convert", "audit", "card", "synth"}


GLOBAL_FLAGS = ("-v", "--verbose", "-q", "--quiet")


def _global_flags_first(argv: list[str]) -> list[str]:
    """-v / -q are the tool's, wherever they are typed (after the teacher too, as pip and git users expect)."""
    flags = [a for a in argv if a in GLOBAL_FLAGS]
    return flags + [a for a in argv if a not in GLOBAL_FLAGS]


def _with_default_command(argv: list[str]) -> list[str]:
    """``dpconvert TEACHER ...`` means ``dpconvert convert TEACHER ...``."""
    for i, arg in enumerate(argv):
        if arg in ("--version", "-h", "--help"):
            return argv
        if arg.startswith("-"):
            continue
        if arg not in KNOWN_COMMANDS:
            return argv[:i] + ["convert"] + argv[i:]
        return argv
    return argv


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notices are not the user's business
    argv = _with_default_command(_global_flags_first(sys.argv[1:]))
    try:
        rc = app(args=argv, prog_name="dpconvert", standalone_mode=False)
        if isinstance(rc, int) and rc:  # Typer turns Ctrl-C into Exit(130) and returns the code
            if rc == 130:
                err.print("interrupted; no output was written", style="bold red")
            sys.exit(rc)
    except DpconvertError as e:
        err.print(f"error: {as_flags(str(e))}", style="bold red", markup=False)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted; no output was written", style="bold red")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors and aborts (Typer may vendor its own click)
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(1)
        raise
    sys.exit(0)
