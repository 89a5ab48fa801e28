"""Console output: Rich on a TTY, plain lines otherwise; logs go to stderr."""

from __future__ import annotations

import logging
import sys

from rich.console import Console

# Not a terminal (CI logs, pipes): a wide fixed width so tables are not squeezed to 80 columns.
_WIDTH = None if sys.stdout.isatty() else 160
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


class _ConsoleHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        from .flags import as_flags

        style = {"WARNING": "yellow", "ERROR": "red"}.get(record.levelname, "dim")
        err.print(as_flags(record.getMessage()), style=style, markup=False)


def setup_logging(verbose: bool = False) -> None:
    log = logging.getLogger("dpconvert")
    if not any(isinstance(h, _ConsoleHandler) for h in log.handlers):
        log.addHandler(_ConsoleHandler())
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False


def is_tty() -> bool:
    return sys.stdout.isatty()
