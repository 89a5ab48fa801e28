"""Console output: Rich on a TTY, plain lines otherwise; logs go to stderr."""

from __future__ import annotations

import logging
import sys

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _ConsoleHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        style = {"WARNING": "yellow", "ERROR": "red"}.get(record.levelname, "dim")
        err.print(f"{record.getMessage()}", style=style, markup=False)


def setup_logging(verbose: bool = False) -> None:
    log = logging.getLogger("dpconvert")
    if not any(isinstance(h, _ConsoleHandler) for h in log.handlers):
        log.addHandler(_ConsoleHandler())
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False


def is_tty() -> bool:
    return sys.stdout.isatty()
