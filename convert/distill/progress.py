"""Progress events of a DPDFD run: named phases with a total and a unit, then advances (the CLI draws a bar each)."""

from __future__ import annotations

from typing import Callable, Optional


class Progress:
    def __init__(self) -> None:
        self.callback: Optional[Callable[[dict], None]] = None
        self.status: Callable[[], str] = lambda: ""  # after each student epoch (the operator-only holdout agreement)

    def phase(self, name: str, total: int, unit: str) -> None:
        if self.callback:
            self.callback({"kind": "phase", "name": name, "total": int(total), "unit": unit})

    def advance(self, done: int, status: str = "") -> None:
        if self.callback:
            self.callback({"kind": "advance", "done": int(done), "status": status})

    def epoch_done(self) -> None:
        if self.callback:
            self.advance(0, self.status())
