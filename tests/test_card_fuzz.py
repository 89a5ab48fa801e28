"""The audit never crashes, whatever a card holds ("The card must never lie, round 2", finding 5).

A property test mutates the fields of genuine cards — a value of another JSON type, NaN, ±∞, 1e999, nesting
deeper than any card, a deleted key — and audits the result: there is never an exception, every failure is one
line, and a mutation that breaks a field's type or removes a field the reader relies on fails with a message that
names the field. A folder audit with one malformed card still reports every other model and writes its reports.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpconvert.auditing.audit import Policy, audit_model
from dpconvert.zoo_cards.card import MAX_DEPTH, field_path

CRAFTED = Path(__file__).parent / "fixtures" / "crafted_cards"
GENUINE = ["dpdfd_genuine", "pknn_genuine", "dpsgd_genuine", "adlm_genuine", "generator_pknn_genuine", "data_genuine"]
# Fields whose deletion a reader must notice (the rest are optional or informational; deleting them must still not crash).
REQUIRED = {"schema_version", "guarantee", "accounting", "mechanism", "warnings", "model", "data", "guarantee.epsilon", "guarantee.delta",
            "guarantee.scope", "guarantee.adjacency", "guarantee.record_level_epsilon", "guarantee.covers", "guarantee.not_covered",
            "accounting.accountant", "accounting.epsilons", "accounting.state", "accounting.state.events", "mechanism.method",
            "mechanism.noise_secret", "mechanism.noise_rng", "mechanism.config", "model.sha256", "model.file", "model.num_classes",
            "model.input_shape", "data.sha256", "data.file"}
# Fields whose schema admits two JSON types on purpose (a type mutation may land on the other one).
TWO_TYPES = {"mechanism.features"}


def _paths(value, where=()):
    yield where
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, where + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, where + (i,))


def _get(data, where):
    for k in where:
        data = data[k]
    return data


def _kind(v) -> str:
    return "bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else type(v).__name__


OTHER_TYPES = ["x", 7, True, {"x": 1}, [1]]
MUTATIONS = ["type", "nan", "inf", "-inf", "1e999", "nest", "delete"]


def _mutate(data: dict, where: tuple, how: str, pick: int) -> tuple[dict, str] | None:
    """(mutated card, its JSON text) or None when the mutation does not apply to this path."""
    card = copy.deepcopy(data)
    parent, key = (_get(card, where[:-1]), where[-1]) if where else (None, None)
    if parent is None:
        return None
    old = parent[key]
    if how == "delete":
        if not isinstance(parent, dict):
            return None
        del parent[key]
    elif how == "type":
        if old is None:  # a nullable field (`command`, `target_epsilon`, …): some other type is its non-null form, valid
            return None
        choices = [v for v in OTHER_TYPES if _kind(v) != _kind(old)]
        parent[key] = choices[pick % len(choices)]
    elif how == "nest":
        nested = old
        for _ in range(MAX_DEPTH + 5):
            nested = [nested]
        parent[key] = nested
    else:
        parent[key] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "1e999": "__HUGE__"}[how]
    text = json.dumps(card).replace('"__HUGE__"', "1e999")  # Python writes NaN/Infinity tokens; 1e999 decodes to inf
    return card, text


@pytest.fixture(scope="module")
def genuine_models(tmp_path_factory):
    """Each genuine crafted card beside a model (or data) file whose hash it binds, with no other copy of the card."""
    from conftest import main_exit_code

    root = tmp_path_factory.mktemp("fuzz")
    assert main_exit_code(["builtin:digits", "--eps", "1", "--steps", "1", "--batch-size", "1000", "--epochs", "1", "--out", root / "m.onnx"]) == 0
    proto = onnx.load(root / "m.onnx")
    del proto.metadata_props[:]  # the sidecar is the only copy: the mutated card is the one audited
    from dpconvert.zoo_cards import model_sha256

    out = {}
    for name in GENUINE:
        data = json.loads((CRAFTED / f"{name}.card.json").read_text())
        d = root / name
        d.mkdir()
        if "model" in data:
            onnx.save(proto, d / "m.onnx")
            data["model"]["sha256"], data["model"]["file"] = model_sha256(proto), "m.onnx"
            target = d / "m.onnx"
        else:
            target = d / "data.npz"
            target.write_bytes(b"not really an npz: only its hash matters here")
            import hashlib

            data["data"]["sha256"], data["data"]["file"] = hashlib.sha256(target.read_bytes()).hexdigest(), "data.npz"
        Path(f"{target}.card.json").write_text(json.dumps(data))
        assert audit_model(target, Policy(max_delta=0.5), run_model=False).passed, name
        out[name] = (target, data)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(GENUINE), index=st.integers(min_value=0), how=st.sampled_from(MUTATIONS), pick=st.integers(0, 10))
def test_the_audit_never_crashes_and_names_the_field(genuine_models, name, index, how, pick):
    target, data = genuine_models[name]
    paths = [p for p in _paths(data) if p]
    where = paths[index % len(paths)]
    mutated = _mutate(data, where, how, pick)
    if mutated is None:
        return
    _, text = mutated
    card_path = Path(f"{target}.card.json")
    original = card_path.read_text()
    try:
        card_path.write_text(text)
        result = audit_model(target, Policy(max_delta=0.5), run_model=False)  # must not raise
    finally:
        card_path.write_text(original)
    failures = result.failures()
    assert all("\n" not in f for f in failures), failures
    field = field_path(where)
    must_fail = how != "delete" and not (how == "type" and field in TWO_TYPES) or how == "delete" and field in REQUIRED
    if must_fail:
        assert not result.passed, (field, how)
        assert any(field in f for f in failures), (field, how, failures)


def _review_cards(data: dict) -> dict:
    """The review's malformed cards (text → the field the failure must name)."""
    canary = copy.deepcopy(data)
    canary["audit"] = {"canary": {"canaries": 10, "guesses": 2, "correct": 1, "confidence": 0.95, "epsilon_lower_bound": "x"}}
    missing = copy.deepcopy(data)
    del missing["guarantee"]["delta"]
    deep = json.dumps(data).replace('"warnings": []', '"warnings": ' + "[" * 5000 + "]" * 5000)
    return {json.dumps(canary): "audit.canary.epsilon_lower_bound", json.dumps(missing): "guarantee.delta", "[" * 100_000: "nested",
            deep: "warnings"}


def test_the_review_s_malformed_cards_fail_in_one_line(genuine_models, tmp_path):
    target, data = genuine_models["dpdfd_genuine"]
    dst = tmp_path / "m.onnx"
    shutil.copy(target, dst)
    for text, field in _review_cards(data).items():
        Path(f"{dst}.card.json").write_text(text)
        result = audit_model(dst, Policy(), run_model=False)
        assert not result.passed and all("\n" not in f for f in result.failures())
        assert any(field in f for f in result.failures()), (field, result.failures())


def test_a_zoo_with_one_malformed_card_still_reports_every_model(genuine_models, tmp_path, cli):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    target, data = genuine_models["dpdfd_genuine"]
    for name in ("good", "bad"):
        shutil.copy(target, zoo / f"{name}.onnx")
        shutil.copy(f"{target}.card.json", zoo / f"{name}.onnx.card.json")
    broken = copy.deepcopy(data)
    broken["accounting"]["state"]["events"][0]["params"] = "x"
    (zoo / "bad.onnx.card.json").write_text(json.dumps(broken))
    (zoo / "worse.onnx").write_bytes(b"\x00not onnx")
    code, _, err = cli("audit", zoo, "--json", tmp_path / "r.json", "--html", tmp_path / "r.html", "--markdown", tmp_path / "r.md")
    assert code == 1 and "Traceback" not in err
    report = {Path(m["path"]).name: m for m in json.loads((tmp_path / "r.json").read_text())["models"]}
    assert report["good.onnx"]["passed"] and not report["bad.onnx"]["passed"] and not report["worse.onnx"]["passed"]
    assert "accounting.state.events[0].params" in json.dumps(report["bad.onnx"]["checks"])
    assert (tmp_path / "r.html").read_text().count("<tr class=") == 3 and "good.onnx" in (tmp_path / "r.md").read_text()


def test_committed_schemas_type_every_method_config():
    """The config types in the schemas are generated from the options dataclasses (tests/fixtures/card_schema.py)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
    from card_schema import SCHEMAS, apply

    for path in sorted(SCHEMAS.glob("*.json")):
        committed = json.loads(path.read_text())
        assert apply(copy.deepcopy(committed)) == committed, f"{path.name}: run python tests/fixtures/card_schema.py"


def test_every_config_key_of_every_fixture_card_is_typed_by_its_schema():
    """The type mutations above must fail for every key; a key the card's schema version does not type (one an older
    release wrote and no options class declares now) would let a changed type through: the schema generator types
    those from ``LEGACY_CONFIG``."""
    import json

    from dpconvert.zoo_cards.card import schema

    untyped = []
    for path in sorted((Path(__file__).parent / "fixtures").rglob("*.card.json")):
        data = json.loads(path.read_text())
        m = data.get("mechanism") or {}
        kind = "model" if "model" in data else "data"
        typed = schema(data["schema_version"], kind)["$defs"].get(f"config_{m.get('method')}", {}).get("properties", {})
        untyped += [f"{path.name}: {k}" for k in (m.get("config") or {}) if k not in typed]
    assert untyped == []
