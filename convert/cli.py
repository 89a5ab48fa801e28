"""The ``dpconvert`` command line: a thin Typer layer over the Python API.

Only parsing and printing live here. Heavy imports (torch, timm, onnx) happen
inside commands so ``dpconvert --help`` is instant. Every ``DpconvertError``
becomes one red line and exit code 1; usage errors exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__
from .console import err, out, setup_logging
from .errors import DpconvertError

app = typer.Typer(
    name="dpconvert",
    help="Convert a sensitive image classifier into a differentially private student, with a privacy card.\n\n"
    "Main form: dpconvert TEACHER --eps 1 --out student.onnx (TEACHER: a file, timm:NAME or builtin:digits).",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,
    add_completion=False,
    no_args_is_help=True,
)

# ------------------------------------------------------------------ shared options
Arch = Annotated[Optional[str], typer.Option("--arch", help="Architecture for weights-only files: timm:NAME or a registered one (e.g. datalens_cnn).")]
NumClasses = Annotated[Optional[int], typer.Option("--num-classes", help="Number of classes (when the source does not say).")]
InChans = Annotated[Optional[int], typer.Option("--in-chans", help="Input channels (e.g. 1 for grayscale timm models).")]
InputSize = Annotated[Optional[str], typer.Option("--input-size", help="Input size C,H,W (e.g. 1,28,28).")]
Mean = Annotated[Optional[str], typer.Option("--mean", help="Per-channel input mean, comma-separated.")]
Std = Annotated[Optional[str], typer.Option("--std", help="Per-channel input std, comma-separated.")]
Weights = Annotated[Optional[Path], typer.Option("--weights", help="Local weights file for timm:NAME (works offline).")]
TrustPickle = Annotated[bool, typer.Option("--trust-pickle", help="Allow unpickling a whole nn.Module. Unpickling runs code from the file: only for files you trust.")]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda or auto.")]


def _load_options(arch, num_classes, in_chans, input_size, mean, std, weights, trust_pickle, device="cpu"):
    from .spec import parse_floats, parse_size
    from .teachers import LoadOptions

    return LoadOptions(
        arch=arch,
        num_classes=num_classes,
        in_chans=in_chans,
        input_size=parse_size(input_size) if input_size else None,
        mean=parse_floats(mean, "--mean") if mean else None,
        std=parse_floats(std, "--std") if std else None,
        weights=str(weights) if weights else None,
        trust_pickle=trust_pickle,
        device=resolve_device(device),
    )


def resolve_device(device: str) -> str:
    if device not in ("cpu", "cuda", "auto") and not device.startswith("cuda:"):
        raise DpconvertError(f"--device must be cpu, cuda or auto, got {device!r}")
    if device == "auto" or device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return "cuda" if device == "auto" else device
        if device != "auto":
            raise DpconvertError("--device cuda was asked for but no CUDA device is available; use --device cpu")
        return "cpu"
    return device


def _version_callback(value: bool) -> None:
    if value:
        out.print(f"dpconvert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More log lines.")] = False,
) -> None:
    setup_logging(verbose)


# ------------------------------------------------------------------ inspect
@app.command()
def inspect(
    teacher: Annotated[str, typer.Argument(help="Teacher: a file (.pt/.pth/.pt2/.safetensors/.onnx), timm:NAME or builtin:NAME.")],
    arch: Arch = None,
    num_classes: NumClasses = None,
    in_chans: InChans = None,
    input_size: InputSize = None,
    mean: Mean = None,
    std: Std = None,
    weights: Weights = None,
    trust_pickle: TrustPickle = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys documented in the README).")] = False,
) -> None:
    """Load a teacher and print what was loaded (source kind, architecture, input spec, sha256)."""
    from .teachers import load_teacher

    t = load_teacher(teacher, _load_options(arch, num_classes, in_chans, input_size, mean, std, weights, trust_pickle))
    info = t.info()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"teacher {teacher}", show_header=False)
    s = t.spec
    rows = [
        ("source kind", t.kind),
        ("architecture", str(t.arch)),
        ("parameters", f"{t.num_params:,}" if t.num_params is not None else "n/a (black box)"),
        ("input", f"{s.channels}x{s.height}x{s.width}  mean={list(s.mean)} std={list(s.std)}"),
        ("classes", str(s.num_classes)),
        ("sha256", str(t.sha256)),
        ("description", t.description),
    ]
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)
    for w in t.warnings:
        err.print(f"warning: {w}", style="yellow")


from . import cli_commands as _cli_commands  # noqa: E402,F401  (registers plan/convert/audit/card)

KNOWN_COMMANDS = {"inspect", "plan", "convert", "audit", "card"}


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
    argv = _with_default_command(sys.argv[1:])
    try:
        rc = app(args=argv, prog_name="dpconvert", standalone_mode=False)
        if isinstance(rc, int) and rc:  # Typer turns Ctrl-C into Exit(130) and returns the code
            if rc == 130:
                err.print("interrupted; no output was written", style="bold red")
            sys.exit(rc)
    except DpconvertError as e:
        err.print(f"error: {e}", style="bold red", markup=False)
        sys.exit(1)
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
