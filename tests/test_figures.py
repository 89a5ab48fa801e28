"""How a card's figures read ("The first hour of a new user, round 2", item 2): one format everywhere, and the
record-level worst case of a query-level card said in words."""

from __future__ import annotations

import json
from pathlib import Path

from dpconvert.zoo_cards.figures import dp_tags, eps_text, scope_sentences

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]


def test_one_format_for_epsilon():
    assert eps_text(38843.0140) == "38,843" and eps_text(0.99934405) == "0.9993" and eps_text(303.2471) == "303.2"
    assert eps_text("inf") == eps_text(float("inf")) == "∞"


def test_a_query_level_card_says_the_teachers_records_are_not_protected(cli, tmp_path):
    out = tmp_path / "s.onnx"
    code, stdout, _ = cli("builtin:digits", *FAST, "--out", out)
    assert code == 0
    card = json.loads(Path(f"{out}.card.json").read_text())
    g = card["guarantee"]
    sentences = scope_sentences(g)
    assert any("no meaningful protection" in s for s in sentences)
    md = Path(f"{out}.card.md").read_text()
    assert "no meaningful protection from this student" in md and eps_text(g["record_level_epsilon"]) in md
    assert f"ε = {g['record_level_epsilon']}" not in md  # never the raw float
    assert "no meaningful protection" in " ".join(stdout.split())  # the summary says it too
    assert "differential-privacy" not in md.split("---")[1] and dp_tags(card) == ["dp-query-level"]


def test_a_record_level_card_keeps_its_tag():
    card = json.loads((Path(__file__).parent / "fixtures" / "previous_release" / "dpsgd.card.json").read_text())
    card["schema_version"] = "1.1"
    assert dp_tags(card) == ["differential-privacy"] and "Record level" in scope_sentences(card["guarantee"])[0]
