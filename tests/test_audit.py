"""`dpconvert audit` on a small zoo: each defect is reported with the right exit code and JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
from conftest import tamper_weights
import pytest

from dpconvert import convert
from dpconvert.zoo_cards import PrivacyCard, embed_card

FAST = dict(releases=2, batch_size=1000, epochs=1)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    (root / "good").mkdir()
    for i, eps in enumerate((1.0, 4.0)):
        convert("builtin:digits", out=root / "good" / f"student{i}.onnx", eps=eps, seed=i, eval_data="builtin:digits", **FAST)
    src = root / "good" / "student0.onnx"

    def copy(name):
        dst = root / name
        shutil.copy(src, dst)
        shutil.copy(f"{src}.card.json", f"{dst}.card.json")
        return dst

    # a model without a card (embedded card stripped too)
    nocard = root / "nocard.onnx"
    proto = onnx.load(src)
    del proto.metadata_props[:]
    onnx.save(proto, nocard)
    # edited ε in the sidecar and the embedded card: claims less than its mechanism gives
    edited = copy("edited_eps.onnx")
    card = PrivacyCard.read(f"{edited}.card.json")
    card.data["guarantee"]["epsilon"] = 0.1
    (root / "edited_eps.onnx.card.json").write_text(card.to_json())
    proto = onnx.load(edited)
    embed_card(proto, card)
    onnx.save(proto, edited)
    # altered weights (card untouched)
    tamper_weights(copy("tampered.onnx"))
    # unknown schema version
    copy("future.onnx")
    data = json.loads((root / "future.onnx.card.json").read_text())
    data["schema_version"] = "9.9"
    (root / "future.onnx.card.json").write_text(json.dumps(data))
    # truncated JSON
    copy("truncated.onnx")
    text = (root / "truncated.onnx.card.json").read_text()
    (root / "truncated.onnx.card.json").write_text(text[: len(text) // 2])
    return root


def _report(cli, tmp_path, *args):
    rep = tmp_path / "report.json"
    code, out, err = cli("audit", *args, "--json", rep)
    return code, json.loads(rep.read_text()) if rep.exists() else None, out + err


def _by_name(report):
    return {m["path"].split("/")[-1]: m for m in report["models"]}


def test_good_models_pass(cli, zoo, tmp_path):
    code, report, _ = _report(cli, tmp_path, zoo / "good")
    assert code == 0 and report["passed"] and len(report["models"]) == 2
    for m in report["models"]:
        assert m["recomputed_epsilon"] == pytest.approx(m["epsilon"], rel=1e-9)


def test_zoo_defects_are_each_reported(cli, zoo, tmp_path):
    code, report, text = _report(cli, tmp_path, zoo)
    assert code == 1 and not report["passed"]
    m = _by_name(report)
    why = {k: " ".join(c["name"] + " " + c["detail"] for c in v["checks"] if not c["ok"]) for k, v in m.items()}
    assert m["student0.onnx"]["passed"] and m["student1.onnx"]["passed"]
    assert "no DP guarantee" in why["nocard.onnx"]
    assert "guarantee.epsilon: card says 0.1 but the accountant events give" in why["edited_eps.onnx"]
    assert "sha256 mismatch" in why["tampered.onnx"]
    assert "unknown privacy-card schema version '9.9'" in why["future.onnx"]
    assert "not valid JSON" in why["truncated.onnx"]


def test_allow_missing(cli, zoo, tmp_path):
    code, report, _ = _report(cli, tmp_path, zoo / "nocard.onnx", "--allow-missing")
    assert code == 0 and report["passed"]


def test_policy(cli, zoo, tmp_path):
    good = zoo / "good"
    assert _report(cli, tmp_path, good, "--max-eps", "2")[0] == 1  # student1 has ε=4
    assert _report(cli, tmp_path, good / "student0.onnx", "--max-eps", "2")[0] == 0
    code, report, _ = _report(cli, tmp_path, good / "student0.onnx", "--require-scope", "record", "--max-record-eps", "10")
    fails = [c["name"] for c in report["models"][0]["checks"] if not c["ok"]]
    assert code == 1 and fails == ["policy scope", "policy max record-level ε"]
    assert _report(cli, tmp_path, good / "student0.onnx", "--min-accuracy", "1.01")[0] == 1


def test_edited_mechanism_parameter_is_caught(cli, zoo, tmp_path):
    """Changing σ on the card without its events (or vice versa) is a drift: the audit fails."""
    dst = tmp_path / "m.onnx"
    shutil.copy(zoo / "good" / "student0.onnx", dst)
    card = PrivacyCard.read(zoo / "good" / "student0.onnx.card.json")
    card.data["mechanism"]["sigma"] *= 2
    (tmp_path / "m.onnx.card.json").write_text(card.to_json())
    code, report, _ = _report(cli, tmp_path, dst)
    assert code == 1
    assert any("mechanism.sigma" in c["detail"] and "disagrees with the accountant events" in c["detail"] for c in report["models"][0]["checks"])


def test_usage_errors_exit_2(cli, tmp_path):
    assert cli("audit", tmp_path / "missing")[0] == 2
    (tmp_path / "empty").mkdir()
    assert cli("audit", tmp_path / "empty")[0] == 2
    assert cli("audit", tmp_path, "--require-scope", "galaxy")[0] == 2


def test_card_show_and_verify(cli, zoo):
    code, out, _ = cli("card", "show", zoo / "good" / "student0.onnx", "--json")
    assert code == 0 and json.loads(out)["guarantee"]["scope"] == "query"
    assert cli("card", "verify", zoo / "good" / "student0.onnx.card.json")[0] == 0
    assert cli("card", "verify", zoo / "tampered.onnx")[0] == 1


def test_reading_a_card_imports_no_torch(zoo):
    import subprocess
    import sys

    code = (
        "import sys; from dpconvert.zoo_cards import PrivacyCard; "
        f"PrivacyCard.read({str(zoo / 'good' / 'student0.onnx.card.json')!r}); print('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


def test_public_query_card_without_the_distinct_input_guard_fails(cli, zoo, tmp_path):
    """Cards written before a release refused repeated inputs understate ε when the queries were public images."""
    card = PrivacyCard.read(zoo / "good" / "student0.onnx.card.json")
    assert card.data["mechanism"]["distinct_inputs"] is True
    card.data["mechanism"]["query_source"] = "public images pub.npz (5000, unlabelled; shift/flip/mixup augmentation) — not data-free"
    for name, guarded in (("guarded", True), ("old", False)):
        dst = tmp_path / f"{name}.onnx"
        shutil.copy(zoo / "good" / "student0.onnx", dst)
        if not guarded:
            del card.data["mechanism"]["distinct_inputs"]
        (tmp_path / f"{name}.onnx.card.json").write_text(card.to_json())
    _, report, _ = _report(cli, tmp_path, tmp_path / "guarded.onnx", tmp_path / "old.onnx")
    checks = {m["path"].split("/")[-1]: {c["name"]: c for c in m["checks"]} for m in report["models"]}
    assert "consistent: mechanism.distinct_inputs" not in checks["guarded.onnx"]
    assert "consistent: mechanism.public_images" in checks["guarded.onnx"]  # public queries must also say how much one image weighs
    old = checks["old.onnx"]["consistent: mechanism.distinct_inputs"]
    assert not old["ok"] and "understated" in old["detail"]


def test_markdown_summary_and_pre_commit_hook(cli, zoo, tmp_path):
    import yaml

    summary = tmp_path / "summary.md"
    code, _, _ = cli("audit", zoo / "good", zoo / "tampered.onnx", "--markdown", summary)
    text = summary.read_text()
    assert code == 1 and "### dpconvert audit: 2/3 pass" in text and "student0.onnx` | ✅ pass |" in text and "❌ FAIL" in text
    hooks = yaml.safe_load((Path(__file__).parents[1] / ".pre-commit-hooks.yaml").read_text())
    assert hooks[0]["id"] == "dpconvert-audit" and hooks[0]["entry"] == "dpconvert audit"


@pytest.mark.slow
def test_a_large_zoo_is_audited_in_parallel_with_the_same_results(tmp_path):
    """Above PARALLEL_FROM models the audit runs on every core; the results (and their order) are the sequential ones."""
    from dpconvert.auditing.audit import PARALLEL_FROM, Policy, audit, audit_model, discover

    crafted = Path(__file__).parent / "fixtures" / "crafted_cards"
    shutil.copytree(crafted, tmp_path / "zoo", ignore=shutil.ignore_patterns("expected.json"))
    models = discover([str(tmp_path / "zoo")])
    assert len(models) >= PARALLEL_FROM
    policy = Policy(allow_seeded_noise=True)
    assert [r.to_dict() for r in audit([str(tmp_path / "zoo")], policy)] == [audit_model(m, policy).to_dict() for m in models]
