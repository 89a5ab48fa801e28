"""Card schema 1.2 writes each method's one name as mechanism.method (`pknn`, `dpsgd`, `dpgan`, as `--method` and
`--generator` spell them); cards of schema 1.1, which wrote `private-knn`, `dp-sgd` and `dp-critic-gan`, still audit.

``fixtures/schema_1_1/`` holds a genuine 1.1 release written by the code of commit 5910cd1 (the last before 1.2) on the
built-in digits: DP-SGD, AdLM and a synthetic data set with their models and every card copy (``release/``), and the
Private-kNN and DPDFD cards alone (``cards/``: their students are 220 kB each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpconvert.auditing.card_checks import check_card
from dpconvert.zoo_cards import SCHEMA_VERSION

CARDS_1_1 = Path(__file__).parent / "fixtures" / "schema_1_1"


def _fields(data: dict) -> set:
    return {w for w, _ in check_card(data)[1]}


@pytest.mark.slow
def test_a_genuine_schema_1_1_release_still_passes_the_audit(cli):
    code, out, _ = cli("audit", CARDS_1_1 / "release")
    assert code == 0 and "3/3 pass" in out, out
    for path in sorted(CARDS_1_1.rglob("*.card.json")):
        data = json.loads(path.read_text())
        assert data["schema_version"] == "1.1" and not _fields(data), path.name
    names = {json.loads(p.read_text())["mechanism"]["method"] for p in CARDS_1_1.rglob("*.card.json")}
    assert {"private-knn", "dp-sgd", "dp-critic-gan"} <= names


@pytest.mark.parametrize("card,old,new", [("release/dpsgd.onnx.card.json", "dp-sgd", "dpsgd"),
                                          ("cards/pknn.onnx.card.json", "private-knn", "pknn"),
                                          ("release/data.npz.card.json", "dp-critic-gan", "dpgan")])
def test_a_card_spells_the_method_as_its_schema_version_does(card, old, new):
    data = json.loads((CARDS_1_1 / card).read_text())
    assert data["mechanism"]["method"] == old and not _fields(data)
    data["mechanism"]["method"] = new  # the new name on a 1.1 card
    assert "mechanism.method" in _fields(data)
    data["schema_version"], data["mechanism"]["method"] = "1.2", old  # the old name on a 1.2 card
    assert "mechanism.method" in _fields(data)


@pytest.mark.slow
def test_a_new_card_carries_the_methods_one_name(tmp_path):
    import dpconvert

    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", method="dpsgd", private_data="builtin:digits:train", eps=1.0, epochs=1)
    assert SCHEMA_VERSION == r.card.data["schema_version"] == "1.2" and r.card.data["mechanism"]["method"] == "dpsgd"
    assert [m.passed for m in dpconvert.audit([str(r.out)])] == [True]
