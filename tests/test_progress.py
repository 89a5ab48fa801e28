"""Progress people can read: one bar per named phase with a count, its unit and the time left, at 80 and 200 columns;
plain lines when the output is not a terminal; no durations when the run read private data."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from dpconvert.cli import render

EVENTS = [
    {"kind": "phase", "name": "release 1/2: queries", "total": 300_000, "unit": "rows", "epsilon": 0.0},
    {"kind": "advance", "done": 300_000, "status": ""},
    {"kind": "phase", "name": "release 1/2: teacher", "total": 300_000, "unit": "rows", "epsilon": 0.0},
    *[{"kind": "advance", "done": 1024, "status": ""} for _ in range(293)],
    {"kind": "phase", "name": "round 1/2: student", "total": 1_500_000, "unit": "rows", "epsilon": 1.0},
    *[{"kind": "advance", "done": 2048, "status": ""} for _ in range(733)],
    {"kind": "advance", "done": 0, "status": "agreement 0.93"},
]


def _render(monkeypatch, width: int, tty: bool, show_time: bool = True) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=tty, color_system=None, highlight=False)
    monkeypatch.setattr("dpconvert.cli.console.is_tty", lambda: tty)
    reporter = render.ProgressReporter(console, show_time)
    for e in EVENTS:
        reporter.tick(e)
    reporter.close()
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue())


@pytest.mark.parametrize("width", [80, 200])
def test_every_phase_has_a_bar_with_its_count_and_unit(monkeypatch, width):
    text = _render(monkeypatch, width, tty=True)
    final = [line for line in re.split(r"[\r\n]", text) if line.strip()][-3:]  # the last frame: one line per phase
    assert [line.split("  ")[0].strip() for line in final][0].startswith("release 1/2: queries")
    for line, count in zip(final, ("300k/300k rows", "300k/300k rows", "1.5M/1.5M rows")):
        assert len(line) <= width and count in line, line
    assert "agreement 0.93" in final[-1] or width == 80 and "round 1/2: student" in final[-1]


def test_plain_output_says_the_phase_and_how_far(monkeypatch):
    text = _render(monkeypatch, 160, tty=False)
    assert "release 1/2: teacher: 50% (" in text and "round 1/2: student: 100% (1.5M/1.5M rows), agreement 0.93" in text


def test_no_time_is_shown_when_the_run_reads_private_data(monkeypatch):
    with_time = _render(monkeypatch, 120, tty=True)
    without = _render(monkeypatch, 120, tty=True, show_time=False)
    assert re.search(r"\d:\d\d", with_time) and not re.search(r"\d:\d\d", without)


def test_a_warning_logged_while_the_bars_are_up_is_printed_whole_and_wrapped(monkeypatch):
    """A log line during a live display goes through the display's console: above the bars, wrapped at the width,
    every word kept (written beside the display, a long warning was cut at the terminal's edge)."""
    import logging

    from dpconvert.cli.console import setup_logging

    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None, highlight=False)
    monkeypatch.setattr("dpconvert.cli.console.is_tty", lambda: True)
    setup_logging()
    reporter = render.ProgressReporter(console, True)
    reporter.tick(EVENTS[0])
    words = [f"word{i}" for i in range(40)]  # ~300 characters: four lines at 80 columns
    logging.getLogger("dpconvert").warning("warning: " + " ".join(words))
    reporter.tick(EVENTS[1])
    reporter.close()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", buf.getvalue())
    lines = [line for line in re.split(r"[\r\n]", text) if "word" in line]
    assert all(w in text for w in words) and all(len(line) <= 80 for line in lines) and len(lines) >= 4
