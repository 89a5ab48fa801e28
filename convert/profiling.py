"""Where the time goes: wall time per phase, items per second, peak memory, for every conversion.

``run_conversion`` opens a ``Profile``; code anywhere below it marks its work with ``with phase("teacher forward",
items=len(x))``. Outside a conversion ``phase`` only times nothing (a no-op context). The result goes to the summary
table and to the card's ``run`` block, which is not privacy-relevant (it says how long, never what was seen).
"""

from __future__ import annotations

import contextvars
import resource
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Optional

_CURRENT: contextvars.ContextVar[Optional["Profile"]] = contextvars.ContextVar("dpconvert_profile", default=None)

# Display order; phases not listed come after, in the order first seen.
PHASES = ("load teacher", "load data", "queries", "teacher forward", "release", "student training", "generator training",
          "kNN votes", "export", "parity", "evaluation", "card")


class Profile:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.items: dict[str, int] = defaultdict(int)
        self.start = time.perf_counter()
        self._token = None

    def __enter__(self) -> "Profile":
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)

    def add(self, name: str, seconds: float, items: int = 0) -> None:
        self.seconds[name] += seconds
        self.items[name] += items

    def to_dict(self) -> dict:
        order = [p for p in PHASES if p in self.seconds] + [p for p in self.seconds if p not in PHASES]
        total = time.perf_counter() - self.start
        return {
            "wall_seconds": round(total, 2),
            "phase_seconds": {p: round(self.seconds[p], 2) for p in order},
            "other_seconds": round(max(0.0, total - sum(self.seconds.values())), 2),
            "items_per_second": {p: round(self.items[p] / self.seconds[p], 1) for p in order if self.items[p] and self.seconds[p] > 0},
            "peak_rss_mib": peak_rss_mib(),
        }


def peak_rss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024, 1)


@contextmanager
def phase(name: str, items: int = 0):
    profile = _CURRENT.get()
    if profile is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        profile.add(name, time.perf_counter() - t0, items)


def median_seconds(fn, *, at_least: float = 0.5, at_most: int = 25) -> float:
    """Median wall time of ``fn()`` over repeats that fill ``at_least`` seconds (at most ``at_most`` of them)."""
    import statistics

    return statistics.median(_timings(fn, at_least, at_most))


def sustained_seconds(fn, *, at_least: float = 2.0, at_most: int = 25) -> float:
    """The median over repeats that fill ``at_least`` seconds: what a time budget is sized from
    (``Dpdfd._budgeted_plan``). Not the fastest repeat: that read a run's phases 15–35 % fast (a run sized to 25
    minutes took 33), where the median of the real per-group work read them within 10 % (benchmarks/RESULTS.md,
    table 15). A machine that is busy while it is timed gets a smaller B, which the plan prints."""
    return median_seconds(fn, at_least=at_least, at_most=at_most)


def _timings(fn, at_least: float, at_most: int) -> list[float]:
    times, start = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < at_least and len(times) < at_most):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times
