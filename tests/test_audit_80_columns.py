"""The audit reads at 80 columns ("The first hour of a new user, round 2", item 4): the reasons are listed under the
table in full (not squeezed into a 9-character column), and two entries with one file name are told apart."""

from __future__ import annotations

import json
import shutil

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]


def test_an_80_column_audit_lists_every_reason_whole_and_tells_entries_apart(cli, tmp_path, monkeypatch):
    import dpconvert.cli.render as render
    from rich.console import Console

    src = tmp_path / "src.onnx"
    assert cli("builtin:digits", *FAST, "--out", src)[0] == 0
    for part in ("a", "b"):
        (tmp_path / "zoo" / part).mkdir(parents=True)
        for suffix in ("", ".card.json", ".card.md"):
            shutil.copy(f"{src}{suffix}", tmp_path / "zoo" / part / f"model.onnx{suffix}")
    edited = tmp_path / "zoo" / "b" / "model.onnx.card.json"
    card = json.loads(edited.read_text())
    card["guarantee"]["epsilon"] = 0.5
    edited.write_text(json.dumps(card))
    console = Console(width=80, record=True, highlight=False, soft_wrap=True, force_terminal=False)
    monkeypatch.setattr(render, "out", console)
    cli("audit", tmp_path / "zoo")
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert any(line.startswith("│ a/model.onnx") and "pass" in line for line in lines)
    assert any(line.startswith("│ b/model.onnx") and "FAIL" in line and "0.5≠1" in line for line in lines)
    assert "card says 0.5 but the accountant events give 1" in " ".join(text.split())  # the reason, whole
    assert "guarantee.epsilon: guarantee.epsilon" not in text


def test_unique_names_keep_just_enough_of_each_path():
    from dpconvert.cli.render import unique_names

    assert unique_names(["z/a/model.onnx", "z/b/model.onnx", "z/c/other.onnx"]) == ["a/model.onnx", "b/model.onnx", "other.onnx"]
