"""The command line: ``app.py`` (the Typer app: parse, call the API, print), ``render.py`` (tables, progress), ``console.py``."""

from .app import app, main

__all__ = ["app", "main"]
