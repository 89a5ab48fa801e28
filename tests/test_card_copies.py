"""Every copy of a card that a person or a tool reads is the one the audit checked ("The card must never lie, round 2").

Each test reproduces one finding of the review (an attack that passed the signed gate, or a leak) and checks it fails
now: a second card in the ONNX metadata, an edited Markdown card or Hub README, data cards that could not be gated,
timings that grow with the private set, δ without a ceiling, card text that reached Markdown unescaped, class folders
whose labels moved when one record was added.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from dpconvert.zoo_cards import METADATA_KEY, SCHEMA_VERSION, PrivacyCard

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]
SYNTH = ["--input-size", "1,8,8", "--num-classes", "10", "--eps", "4", "--gan-generator-steps", "10", "--samples", "200"]


def _gate(signed: Path) -> list:
    return ["--trusted-keys", signed / "keys", "--require-signature", "--max-eps", "1"]


def _copy_model(src: Path, dst: Path, md: bool = True) -> Path:
    shutil.copy(src, dst)
    shutil.copy(f"{src}.card.json", f"{dst}.card.json")
    if md:
        Path(f"{dst}.card.md").write_text(Path(f"{src}.card.md").read_text().replace(src.name, dst.name))
    return dst


def _failures(cli, tmp_path, *args) -> tuple[int, dict]:
    rep = tmp_path / "r.json"
    code, _, _ = cli("audit", *args, "--json", rep)
    report = json.loads(rep.read_text())
    return code, {Path(m["path"]).name: " | ".join(f"{c['name']}: {c['detail']}" for c in m["checks"] if not c["ok"]) for m in report["models"]}


def test_the_signed_model_passes_the_gate(signed, cli, tmp_path):
    code, why = _failures(cli, tmp_path, signed / "s.onnx", *_gate(signed))
    assert code == 0, why


def test_a_second_metadata_card_fails_the_signed_gate(signed, cli, tmp_path):
    """Finding 1: onnxruntime shows the last entry, the audit read the first; now a duplicate key is refused."""
    import onnxruntime as ort

    m = _copy_model(signed / "s.onnx", tmp_path / "dup.onnx")
    proto = onnx.load(m)
    forged = json.loads(next(p.value for p in proto.metadata_props if p.key == METADATA_KEY))
    forged["guarantee"]["epsilon"] = 0.01
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(forged)
    onnx.save(proto, m)
    shown = ort.InferenceSession(str(m), providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map[METADATA_KEY]
    assert json.loads(shown)["guarantee"]["epsilon"] == 0.01  # what another tool would show
    code, why = _failures(cli, tmp_path, m, *_gate(signed))
    assert code == 1 and f"2 `{METADATA_KEY}` entries" in why["dup.onnx"]


def test_a_duplicate_foreign_metadata_key_fails_the_onnx_checks(signed, cli, tmp_path):
    m = _copy_model(signed / "s.onnx", tmp_path / "other.onnx")
    proto = onnx.load(m)
    for value in ("a", "b"):
        entry = proto.metadata_props.add()
        entry.key, entry.value = "license", value
    onnx.save(proto, m)
    code, why = _failures(cli, tmp_path, m, *_gate(signed))
    assert code == 1 and "ONNX metadata: duplicate metadata key(s) 'license'" in why["other.onnx"]


def test_an_edited_markdown_card_fails_the_signed_gate(signed, cli, tmp_path):
    """Finding 2: the .card.md people read was never compared with the checked card."""
    m = _copy_model(signed / "s.onnx", tmp_path / "md.onnx")
    md = Path(f"{m}.card.md")
    text = md.read_text()
    assert "**(ε, δ) = (1, " in text
    md.write_text(text.replace("**(ε, δ) = (1, ", "**(ε, δ) = (0.01, "))
    code, why = _failures(cli, tmp_path, m, *_gate(signed))
    assert code == 1 and ".card.md matches" in why["md.onnx"]


def test_an_edited_hub_readme_fails_the_signed_gate(signed, cli, tmp_path):
    """Finding 2: the Hugging Face README's headline and tags were never checked."""
    hub = tmp_path / "hub"
    hub.mkdir()
    model = _copy_model(signed / "s.onnx", hub / "s.onnx", md=False)
    assert cli("card", "export", model, "--out", hub / "README.md", "--license", "apache-2.0")[0] == 0
    assert cli("card", "export", model, "--out", hub / "README.md")[0] == 1  # never overwritten silently
    original = (hub / "README.md").read_text()
    assert _failures(cli, tmp_path, hub, *_gate(signed))[0] == 0
    for old, new in (("**(ε, δ) = (1, ", "**(ε, δ) = (0.01, "), ('"dp-scope-query"', '"dp-scope-record"')):
        assert old in original
        (hub / "README.md").write_text(original.replace(old, new))
        code, why = _failures(cli, tmp_path, hub, *_gate(signed))
        assert code == 1 and "README.md matches: line" in why["s.onnx"], why
    # a README that claims dpconvert's tags but carries no card is a copy nobody can check
    (hub / "README.md").write_text("---\ntags: [dpconvert, differential-privacy]\n---\n# ε = 0.01, record-level\n")
    code, why = _failures(cli, tmp_path, hub, *_gate(signed))
    assert code == 1 and "holds no privacy card" in why["s.onnx"]


def test_signing_rewrites_every_copy(signed, cli, tmp_path):
    hub = tmp_path / "hub"
    hub.mkdir()
    unsigned = hub / "u.onnx"
    assert cli("builtin:digits", "--eps", "1", *FAST, "--out", unsigned)[0] == 0
    assert cli("card", "export", unsigned, "--out", hub / "README.md", "--license", "mit")[0] == 0
    assert cli("card", "sign", unsigned, "--key", signed / "keys" / "release")[0] == 0
    code, why = _failures(cli, tmp_path, hub, *_gate(signed))
    assert code == 0, why
    assert 'license: "mit"' in (hub / "README.md").read_text()


# ------------------------------------------------------------------ data cards (finding 3) and timings (finding 4)
@pytest.fixture(scope="module")
def synthetic(signed, tmp_path_factory):
    from conftest import main_exit_code

    d = tmp_path_factory.mktemp("synth")
    assert main_exit_code(["synth", "--private-data", "builtin:digits:train", "--out", d / "data.npz", *SYNTH,
                           "--sign-key", signed / "keys" / "release"]) == 0
    return d / "data.npz"


@pytest.mark.slow
def test_a_synth_data_card_is_gated_like_a_model(synthetic, signed, cli, tmp_path):
    card = json.loads(Path(f"{synthetic}.card.json").read_text())
    text = json.dumps(card)
    assert "seconds" not in text and '"run"' not in text and card["schema_version"] == SCHEMA_VERSION
    for target in (synthetic, f"{synthetic}.card.json", synthetic.parent):
        code, why = _failures(cli, tmp_path, target, *_gate(signed), "--max-eps", "4", "--require-scope", "record")
        assert code == 0, why
    code, out, _ = cli("card", "show", synthetic)
    assert code == 0 and "synthetic data set" in out
    # the data altered
    altered = tmp_path / "data.npz"
    shutil.copy(f"{synthetic}.card.json", f"{altered}.card.json")
    with np.load(synthetic) as f:
        x, y = f["x"].copy(), f["y"]
    x[0, 0, 0, 0] ^= 1
    np.savez_compressed(altered, x=x, y=y)
    code, why = _failures(cli, tmp_path, altered, *_gate(signed), "--max-eps", "4")
    assert code == 1 and "data hash" in why["data.npz"]
    # the card altered (a weaker claim, consistent with the events, still breaks the signature)
    shutil.copy(synthetic, altered)
    edited = dict(card, guarantee={**card["guarantee"], "epsilon": 3.999})
    Path(f"{altered}.card.json").write_text(json.dumps(edited))
    code, why = _failures(cli, tmp_path, altered, *_gate(signed), "--max-eps", "4")
    assert code == 1 and "signature" in why["data.npz"]


def test_a_data_card_can_be_signed_after_the_fact(synthetic, signed, cli, tmp_path):
    data = tmp_path / "d.npz"
    shutil.copy(synthetic, data)
    card = json.loads(Path(f"{synthetic}.card.json").read_text())
    del card["signature"]
    Path(f"{data}.card.json").write_text(json.dumps(card))
    assert _failures(cli, tmp_path, data, *_gate(signed), "--max-eps", "4")[0] == 1
    assert cli("card", "sign", data, "--key", signed / "keys" / "release")[0] == 0
    assert _failures(cli, tmp_path, data, *_gate(signed), "--max-eps", "4")[0] == 0


@pytest.mark.slow
def test_timings_stay_off_artefacts_and_the_console_with_private_data(tmp_path, cli):
    args = ["builtin:digits", "--method", "dpsgd", "--private-data", "builtin:digits:train", "--epochs", "1", "--out"]
    code, out, err = cli(*args, tmp_path / "a.onnx")
    assert code == 0, err
    assert "time per phase" not in out and "--show-timings" in out
    run = json.loads(Path(f"{tmp_path / 'a.onnx'}.card.json").read_text())["run"]
    # nothing that scales with the private set; no teacher_runtime: DP-SGD never asks the teacher, so it stays in torch
    assert set(run) == {"device", "torch_threads", "timings"}
    code, out, err = cli(*args, tmp_path / "b.onnx", "--show-timings")
    assert code == 0 and "time per phase" in out
    assert "phase_seconds" not in json.loads(Path(f"{tmp_path / 'b.onnx'}.card.json").read_text())["run"]  # never on the card


# ------------------------------------------------------------------ δ (finding 8)
def test_a_large_delta_needs_an_opt_in_that_the_card_and_the_audit_show(tmp_path, cli):
    code, _, err = cli("builtin:digits", "--delta", "0.3", *FAST, "--out", tmp_path / "s.onnx")
    assert code == 2 and "--allow-large-delta" in err and not list(tmp_path.iterdir())
    code, _, err = cli("builtin:digits", "--delta", "0.3", "--allow-large-delta", *FAST, "--out", tmp_path / "s.onnx")
    assert code == 0, err
    card = PrivacyCard.read(f"{tmp_path / 's.onnx'}.card.json")
    assert any(w.startswith("δ above the ceiling") for w in card.data["warnings"])
    code, why = _failures(cli, tmp_path, tmp_path / "s.onnx", "--max-eps", "1")
    assert code == 1 and "policy max δ: δ=0.3 > 0.0001" in why["s.onnx"]
    assert _failures(cli, tmp_path, tmp_path / "s.onnx", "--max-delta", "0.5")[0] == 0


@pytest.mark.slow
def test_the_default_delta_does_not_warn_on_the_default_run(tmp_path, cli):
    """δ is tied to the number of protected answers, so the quick start's card carries no δ warning."""
    from dpconvert.methods.dpdfd_options import default_batch_size
    from dpconvert.io.spec import InputSpec

    code, _, err = cli("builtin:digits", "--epochs", "1", "--out", tmp_path / "s.onnx")
    assert code == 0, err
    card = PrivacyCard.read(f"{tmp_path / 's.onnx'}.card.json").data
    rows = card["mechanism"]["batch_size"] * card["mechanism"]["releases"]
    assert rows == default_batch_size(InputSpec(1, 8, 8, 10))
    assert card["guarantee"]["delta"] * rows <= 1 and card["warnings"] == [] and "δ" not in err
    code, out, _ = cli("plan", "--method", "dpdfd", "--eps", "1", "--input-size", "1,8,8", "--json")  # plan plans this very run
    plan = json.loads(out)
    m = card["mechanism"]
    assert (plan["sigma"], plan["steps"], plan["batch_size"], plan["delta"]) == (m["sigma"], m["releases"], m["batch_size"], card["guarantee"]["delta"])


# ------------------------------------------------------------------ escaping (finding 9)
def test_card_text_is_escaped_in_markdown_and_html(signed, tmp_path):
    from dpconvert.auditing.audit import Policy, audit_model
    from dpconvert.auditing.report import html_report
    from dpconvert.auditing.report import audit_markdown
    from dpconvert.zoo_cards import render_markdown

    hostile = "<img src=x onerror=alert(1)> [click](https://evil.example) | `x`"
    m = _copy_model(signed / "s.onnx", tmp_path / "h.onnx", md=False)
    card = PrivacyCard.read(f"{m}.card.json")
    card.data["mechanism"]["method"] = hostile
    card.data["warnings"] = [hostile]
    Path(f"{m}.card.json").write_text(card.to_json())
    result = audit_model(m, Policy())
    assert not result.passed
    import re

    for text in (audit_markdown([result]), render_markdown(card)):
        assert hostile[:4] in text.replace("\\", "")  # the text is there, as text
        assert not re.search(r"(?<!\\)<img", text) and not re.search(r"(?<!\\)\]\(", text) and "https://" not in text
    assert "<img" not in html_report([result], Policy().to_dict())


# ------------------------------------------------------------------ class folders (finding 10)
def _folder(root: Path, counts: dict) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, n in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def test_named_class_folders_need_a_declared_class_list(tmp_path):
    from dpconvert.errors import DpconvertError
    from dpconvert.io.data import load_data, parse_class_names
    from dpconvert.io.spec import InputSpec

    spec = InputSpec(1, 8, 8, 3)
    before = _folder(tmp_path / "a", {"cat": 3, "dog": 2})
    with pytest.raises(DpconvertError, match="class_names"):
        load_data(str(before), spec, require_labels=True)
    names = ["ant", "cat", "dog"]
    labels = load_data(str(before), spec, require_labels=True, class_names=names).y.tolist()
    after = _folder(tmp_path / "b", {"cat": 3, "dog": 2, "ant": 1})  # one record in a new folder
    grown = load_data(str(after), spec, require_labels=True, class_names=names).y.tolist()
    assert labels == [1, 1, 1, 2, 2] and sorted(grown) == [0] + labels  # nobody else's label moved
    with pytest.raises(DpconvertError, match="'ant' is not in the declared"):
        load_data(str(after), spec, require_labels=True, class_names=["cat", "dog", "emu"])
    (tmp_path / "classes.txt").write_text("ant\ncat\ndog\n")
    assert parse_class_names(str(tmp_path / "classes.txt")) == names == parse_class_names("ant,cat,dog")
