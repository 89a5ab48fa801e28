"""The command line: ``app.py`` (the Typer app, its shared options and the entry point) and one module per command
group, each parsing its options, calling the Python API and printing: ``teacher_cmd.py`` (inspect), ``plan_cmd.py``,
``convert_cmd.py`` (convert, synth), ``audit_cmd.py``, ``card_cmd.py``; ``render.py`` (tables, progress), ``console.py``."""

# each module registers its commands on the app; the import order is the order of `dpconvert --help`
from . import convert_cmd, plan_cmd, audit_cmd, teacher_cmd, card_cmd  # noqa: F401
from .app import app, main

__all__ = ["app", "main"]
