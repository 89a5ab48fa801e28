"""A teacher trained with DP passes its record-level guarantee on to a data-free student, only from a teacher card that
verifies; the audit verifies the chain again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import tamper_weights

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]


def _card(path) -> dict:
    return json.loads(Path(f"{path}.card.json").read_text())


@pytest.mark.slow
def test_a_dp_trained_teacher_passes_its_record_level_guarantee_on(dp_teacher, tmp_path, cli):
    out = tmp_path / "s.onnx"
    code, _, err = cli(dp_teacher, "--eps", "1", *FAST, "--out", out)  # the card embedded in the ONNX teacher
    assert code == 0, err
    card, teacher = _card(out), _card(dp_teacher)
    t = card["teacher"]
    assert t["trained_with_dp"] is True and t["guarantee"]["scope"] == "record"
    assert t["guarantee"]["epsilon"] == pytest.approx(teacher["guarantee"]["epsilon"]) and t["guarantee"]["card"] == teacher
    assert card["guarantee"]["scope"] == "query"  # DPDFD's own query-level ε stays alongside
    assert "the teacher was trained with DP" in Path(f"{out}.card.md").read_text()
    assert cli("audit", out)[0] == 0


@pytest.mark.slow
def test_the_audit_fails_an_edited_teacher_block(dp_teacher, tmp_path, cli):
    from dpconvert.auditing.card_checks import check_card

    out = tmp_path / "s.onnx"
    assert cli(dp_teacher, "--eps", "1", *FAST, "--out", out)[0] == 0
    card = _card(out)
    for edit, field in ((lambda t: t["guarantee"].update(epsilon=0.01), "teacher.guarantee.epsilon"),
                        (lambda t: t["guarantee"]["card"]["mechanism"].update(sigma=t["guarantee"]["card"]["mechanism"]["sigma"] * 3),
                         "teacher.guarantee.card"),
                        (lambda t: t["guarantee"].update(model_sha256="0" * 64), "teacher.guarantee.card"),
                        (lambda t: t.pop("guarantee"), "teacher.trained_with_dp")):
        forged = json.loads(json.dumps(card))
        edit(forged["teacher"])
        assert any(w == field for w, _ in check_card(forged)[1]), field


@pytest.mark.slow
def test_a_changed_teacher_file_passes_nothing_on(dp_teacher, tmp_path, cli):
    changed = tmp_path / "teacher.onnx"
    shutil.copy(dp_teacher, changed)
    tamper_weights(changed)  # its embedded card no longer describes its weights
    code, _, err = cli(changed, "--eps", "1", *FAST, "--teacher-card", f"{dp_teacher}.card.json", "--out", tmp_path / "a.onnx")
    assert code == 1 and "do not match its card" in err and not (tmp_path / "a.onnx").exists()
    code, _, err = cli(changed, "--eps", "1", *FAST, "--out", tmp_path / "b.onnx")  # embedded card: converted, nothing inherited
    assert code == 0, err
    card = _card(tmp_path / "b.onnx")
    assert card["teacher"]["trained_with_dp"] is None and "guarantee" not in card["teacher"]
    assert any("not passed on" in w for w in card["warnings"])


def test_a_query_level_teacher_card_passes_nothing_on(tmp_path, cli):
    first = tmp_path / "dpdfd.onnx"
    assert cli("builtin:digits", "--eps", "1", *FAST, "--out", first)[0] == 0
    code, _, err = cli(first, "--eps", "1", *FAST, "--teacher-card", f"{first}.card.json", "--out", tmp_path / "s.onnx")
    assert code == 1 and "record-level" in err
