"""Console output: Rich on a TTY, plain lines otherwise; logs go to stderr."""

from __future__ import annotations

import logging
import sys

from rich.console import Console

# Not a terminal (CI logs, pipes): a wide fixed width so tables are not squeezed to 80 columns, and lines left whole.
# On a terminal, Rich wraps long lines at words (left to the terminal, "output-gradient" broke as "out" / "put-gradient").
_TTY = sys.stdout.isatty()
_WIDTH = None if _TTY else 160
out = Console(highlight=False, soft_wrap=not _TTY, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty(), width=None if sys.stderr.isatty() else 160)


QUIET = False  # `-q`: no plan and no progress; warnings, errors and the result only

# The console a live progress display is drawing on (``render.ProgressReporter``), while it is up: log lines go through
# it so that they are printed above the bars and wrapped at the terminal's width (written to stderr beside the live
# display, a long line was cut at the edge instead).
_live_console = None


def set_live_console(console) -> None:
    global _live_console
    _live_console = console


class _ConsoleHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        from .flags import as_flags

        style = {"WARNING": "yellow", "ERROR": "red"}.get(record.levelname, "dim")
        target = _live_console if _live_console is not None else err
        target.print(as_flags(record.getMessage()), style=style, markup=False, soft_wrap=False)


def setup_logging(verbose: bool = False, quiet: bool = False) -> None:
    log = logging.getLogger("dpconvert")
    if not any(isinstance(h, _ConsoleHandler) for h in log.handlers):
        log.addHandler(_ConsoleHandler())
    log.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    log.propagate = False


def is_tty() -> bool:
    return sys.stdout.isatty()
