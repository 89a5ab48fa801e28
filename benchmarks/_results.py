"""Shared by the benchmark scripts: print a result row and append it to a JSON list file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def report(row: dict, json_path: Optional[str]) -> None:
    print(json.dumps(row, indent=2))
    append_row(row, json_path)


def append_row(row: dict, json_path: Optional[str]) -> None:
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        old = json.loads(path.read_text()) if path.exists() else []
        path.write_text(json.dumps(old + [row], indent=2) + "\n")
