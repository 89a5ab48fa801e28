"""The card must never lie: forged cards fail, noise is secret, nothing data-dependent leaks, teachers are checked,
signatures bind card and weights. (Per-record preprocessing: test_private_preprocessing.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from conftest import tamper_weights
import pytest
import torch

from dpconvert.auditing.card_checks import check_card
from dpconvert.errors import DpconvertError
from dpconvert.zoo_cards import PrivacyCard, embed_card

CRAFTED = Path(__file__).parent / "fixtures" / "crafted_cards"
EXPECTED = json.loads((CRAFTED / "expected.json").read_text())
FAST = ["--steps", "2", "--batch-size", "1500", "--epochs", "1"]
PKNN_FAST = ["--method", "pknn", "--private-data", "builtin:digits:train", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "2",
             "--queries", "300", "--delta", "1e-4"]


# ------------------------------------------------------------------ forged cards
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_crafted_cards_fail_naming_the_field(name):
    """Genuine cards pass every consistency check; each forged one fails with a problem naming the forged field."""
    data = json.loads((CRAFTED / name).read_text())
    try:
        PrivacyCard(data).validate(name)
        _, problems = check_card(data)
    except DpconvertError as e:  # a wrong type is a schema failure, which names the field too
        problems = [(str(e).split(" at ", 1)[1].split(":", 1)[0], str(e))]
    field = EXPECTED[name]
    if field is None:
        assert problems == [], problems
    else:
        assert any(where == field or where.startswith(field + ".") for where, _ in problems), (field, problems)


@pytest.fixture(scope="module")
def dpdfd_model(tmp_path_factory):
    from conftest import main_exit_code

    d = tmp_path_factory.mktemp("trust")
    assert main_exit_code(["builtin:digits", "--eps", "1", *FAST, "--out", d / "s.onnx"]) == 0
    return d / "s.onnx"


def _rewrite_card(model: Path, dst: Path, edit) -> Path:
    """Copy the model and forge both the sidecar and the embedded card (model hash unchanged)."""
    shutil.copy(model, dst)
    card = PrivacyCard.read(f"{model}.card.json")
    edit(card.data)
    Path(f"{dst}.card.json").write_text(card.to_json())
    proto = onnx.load(dst)
    embed_card(proto, card)
    onnx.save(proto, dst)
    return dst


def test_audit_rejects_a_relabelled_scope_even_with_both_copies_forged(dpdfd_model, tmp_path, cli):
    """The finding: a DPDFD card relabelled ``scope: record`` passed --require-scope record (its record-level ε is huge)."""
    forged = _rewrite_card(dpdfd_model, tmp_path / "f.onnx", lambda d: d["guarantee"].update(scope="record", record_level_epsilon=0.9))
    code, outp, _ = cli("audit", forged, "--require-scope", "record", "--json", tmp_path / "r.json")
    report = json.loads((tmp_path / "r.json").read_text())["models"][0]
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    assert code == 1 and {"consistent: guarantee.scope", "consistent: guarantee.record_level_epsilon", "policy scope"} <= failed
    assert report["scope"] == "query"  # derived from the accountant, not read from the card


# ------------------------------------------------------------------ signatures
@pytest.mark.slow
def test_signed_cards(dpdfd_model, tmp_path, cli):
    keys, other = tmp_path / "keys", tmp_path / "other"
    keys.mkdir()
    other.mkdir()
    assert cli("card", "keygen", keys / "release")[0] == 0
    assert cli("card", "keygen", other / "mallory")[0] == 0
    assert (keys / "release").stat().st_mode & 0o777 == 0o600
    assert cli("card", "keygen", keys / "release")[0] == 1  # never overwrites a key
    signed = tmp_path / "signed.onnx"
    code, _, err = cli("builtin:digits", "--eps", "1", *FAST, "--out", signed, "--sign-key", keys / "release")
    assert code == 0, err
    gate = ["--require-signature", "--trusted-keys", keys]
    code, outp, _ = cli("audit", signed, *gate)
    assert code == 0, outp
    # unsigned
    assert cli("audit", dpdfd_model, *gate)[0] == 1
    # signed with a key the auditor does not trust
    by_mallory = tmp_path / "mallory.onnx"
    shutil.copy(dpdfd_model, by_mallory)
    shutil.copy(f"{dpdfd_model}.card.json", f"{by_mallory}.card.json")
    assert cli("card", "sign", by_mallory, "--key", other / "mallory")[0] == 0
    code, outp, _ = cli("audit", by_mallory, *gate)
    assert code == 1 and "not among the trusted keys" in outp
    # the card changed after signing (both copies, consistently: ε raised, which the consistency checks accept)
    edited = _rewrite_card(signed, tmp_path / "edited.onnx", lambda d: d["guarantee"].update(epsilon=2.0))
    code, outp, _ = cli("audit", edited, *gate)
    assert code == 1 and "does not match" in outp
    assert cli("audit", edited)[0] == 0  # without the signature policy the raised ε is still a true bound
    # the weights changed after signing
    tampered = tmp_path / "tampered.onnx"
    shutil.copy(signed, tampered)
    shutil.copy(f"{signed}.card.json", f"{tampered}.card.json")
    tamper_weights(tampered)
    assert cli("audit", tampered, *gate)[0] == 1
    # `card sign` with the trusted key makes an unsigned model pass; a signed card is still a valid card
    resigned = tmp_path / "resigned.onnx"
    shutil.copy(dpdfd_model, resigned)
    shutil.copy(f"{dpdfd_model}.card.json", f"{resigned}.card.json")
    assert cli("card", "sign", resigned, "--key", keys / "release")[0] == 0
    assert cli("audit", resigned, *gate)[0] == 0
    assert cli("audit", resigned, "--require-signature")[0] == 2  # which keys? a usage error


# ------------------------------------------------------------------ secret noise
def test_secret_generator_state_comes_from_os_entropy(monkeypatch):
    import os

    from dpconvert.mechanisms import noise

    calls = []
    real = os.urandom

    def spy(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(noise.os, "urandom", spy)
    a, b = noise.secret_generator(), noise.secret_generator()
    assert calls == [4 * 624, 4 * 624]  # the whole MT19937 state each time: 19 968 bits ≥ 128
    assert not torch.equal(torch.randn(64, generator=a), torch.randn(64, generator=b))
    g, info = noise.mechanism_rng(0)
    assert info["noise_secret"] is True and info["noise_rng"] == noise.SECRET_RNG
    g1, _ = noise.mechanism_rng(0, seeded=True)
    g2, _ = noise.mechanism_rng(0, seeded=True)
    assert torch.equal(torch.randn(8, generator=g1), torch.randn(8, generator=g2))


# ------------------------------------------------------------------ data-dependent side channels
@pytest.mark.slow
def test_private_set_size_and_data_dependent_checks_stay_off_the_card(tmp_path, cli):
    """The findings: the card published n exactly, and a missing class or k > γn/2 aborted the run."""
    rng = np.random.default_rng(0)
    n = 613
    x = rng.integers(0, 256, (n, 8, 8)).astype(np.uint8)
    y = rng.integers(0, 9, n)  # class 9 never appears
    np.savez(tmp_path / "private.npz", x=x, y=y)
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--private-data", tmp_path / "private.npz", "--public-data", "builtin:digits", "--k", "200",
                       "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "1", "--queries", "200", "--eps", "8", "--delta", "1e-2",
                       "--allow-large-delta", "--out", out)
    assert code == 0, err  # k=200 > γn/2 ≈ 92 and a missing class: console notes, no abort
    text = (tmp_path / "s.onnx.card.json").read_text()
    assert "613" not in text and "private_records" not in text and "1/n" not in text


# ------------------------------------------------------------------ teacher checks
class _BatchStats(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(self.bn(x).flatten(1))


def test_teacher_exported_in_training_mode_is_refused(tmp_path, cli):
    """The finding: a .pt2 exported with BatchNorm in training mode answers each row from the whole batch."""
    m = _BatchStats().train()
    torch.export.save(torch.export.export(m, (torch.randn(4, 1, 8, 8),)), str(tmp_path / "t.pt2"))
    out = tmp_path / "s.onnx"
    code, _, err = cli(tmp_path / "t.pt2", "--num-classes", "10", "--eps", "1", *FAST, "--out", out)
    assert code == 1 and "eval mode" in err
    assert not out.exists()
    torch.export.save(torch.export.export(m.eval(), (torch.randn(4, 1, 8, 8),)), str(tmp_path / "e.pt2"))
    code, _, err = cli(tmp_path / "e.pt2", "--num-classes", "10", "--eps", "1", *FAST, "--out", out)
    assert code == 0, err


def test_non_finite_answers_are_never_released():
    from dpconvert.accounting import DpdfdAccountant
    from dpconvert.mechanisms.gaussian_release import NormalisedGaussianRelease
    from dpconvert.mechanisms.teacher_checks import check_teacher

    with pytest.raises(DpconvertError, match="non-finite"):
        check_teacher(lambda x: torch.full((len(x), 10), float("inf")), torch.randn(8, 1, 8, 8))
    mech = NormalisedGaussianRelease(sigma=1.0, clip=1.0, accountant=DpdfdAccountant(), generator=torch.Generator().manual_seed(0))
    grads = torch.randn(6, 10)
    grads[1, 3], grads[4] = float("nan"), float("inf")
    released = mech.release(grads)
    assert torch.isfinite(released).all() and mech.zeroed_rows == 2
    assert torch.equal(mech.normalise(grads)[[1, 4]], torch.zeros(2, 10))
    assert (mech.normalise(grads).norm(dim=1) <= 1.0 + 1e-6).all()


# ------------------------------------------------------------------ saved generators
@pytest.fixture(scope="module")
def saved_gen(tmp_path_factory):
    from conftest import main_exit_code

    d = tmp_path_factory.mktemp("gen")
    gen = d / "gen.safetensors"
    assert main_exit_code(["builtin:digits", "--eps", "2", "--delta", "1e-4", "--generator", "dafl_small", "--steps", "2",
                           "--batch-size", "1000", "--epochs", "1", "--save-generator", gen, "--out", d / "dpdfd.onnx"]) == 0
    return gen


@pytest.mark.slow
def test_saved_generator_is_bound_to_its_weights_and_teacher(saved_gen, tmp_path, cli):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from dpconvert.io.hashing import file_sha256

    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", saved_gen, "--eps", "8", *PKNN_FAST, "--out", out)
    assert code == 0, err
    info = json.loads((tmp_path / "s.onnx.card.json").read_text())["mechanism"]["query_generator"]
    assert info["file_sha256"] == file_sha256(saved_gen) and info["dpdfd"]["distinct_inputs"] is True
    assert info["dpdfd"]["noise_secret"] is True
    # weights changed after saving: the cost in the metadata no longer describes them
    with safe_open(str(saved_gen), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1
    save_file(tensors, str(tmp_path / "edited.safetensors"), metadata=meta)
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", tmp_path / "edited.safetensors", "--eps", "8", *PKNN_FAST,
                       "--out", tmp_path / "e.onnx")
    assert code == 1 and "do not match the hash" in err
    # the recorded cost cut after saving (the weights untouched): "2 releases at σ" → "1 release at 10σ"
    with safe_open(str(saved_gen), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    cost = json.loads(meta["cost"])
    event = cost["accountant_state"]["events"][0]
    event["count"], event["params"]["sigma"] = 1, event["params"]["sigma"] * 10
    cost["mechanism"].update(releases=1, sigma=event["params"]["sigma"])
    save_file(tensors, str(tmp_path / "cheaper.safetensors"), metadata={**meta, "cost": json.dumps(cost)})
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", tmp_path / "cheaper.safetensors", "--eps", "8", *PKNN_FAST,
                       "--out", tmp_path / "c.onnx")
    assert code == 1 and "recorded cost" in err and not (tmp_path / "c.onnx").exists()
    # another teacher (same input shape): the generator's cost covered the other teacher's answers only
    other = create_digits_shaped_teacher(tmp_path)
    code, _, err = cli(other, "--arch", "datalens_cnn", "--num-classes", "10", "--input-size", "1,8,8", "--method", "pknn",
                       "--query-generator", saved_gen, "--eps", "8", *PKNN_FAST, "--out", tmp_path / "o.onnx")
    assert code == 1 and "another teacher" in err


def create_digits_shaped_teacher(tmp_path: Path) -> Path:
    from safetensors.torch import save_file

    from dpconvert.io.spec import InputSpec
    from dpconvert.students import create_student

    torch.manual_seed(1)
    m = create_student("datalens_cnn", InputSpec(1, 8, 8, 10))
    path = tmp_path / "other.safetensors"
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(path))
    return path


# ------------------------------------------------------------------ δ against the number of protected answers
@pytest.mark.slow
def test_large_delta_for_the_number_of_answers_is_warned(tmp_path, cli):
    code, _, err = cli("builtin:digits", "--eps", "1", "--delta", "1e-4", "--steps", "1", "--batch-size", "20000", "--epochs", "1",
                       "--out", tmp_path / "s.onnx")
    assert code == 0, err
    warnings = json.loads((tmp_path / "s.onnx.card.json").read_text())["warnings"]
    assert any("1/(B·T) = 1/20000" in w and "`delta` 1e-05" in w for w in warnings), warnings


# ------------------------------------------------------------------ public-image queries: the per-image ε
@pytest.mark.slow
def test_public_image_queries_carry_a_per_image_epsilon(tmp_path, cli):
    """Augmented copies of one public image are different queries, so the query-level ε says little about one image:
    the card records the most rows one source image filled (m) and the ε for all of its answers (sensitivity √m·C)."""
    from dpconvert.accounting import dpdfd, gaussian

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "pub.npz", x=rng.integers(0, 256, (1000, 8, 8)).astype(np.uint8))
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--public-data", tmp_path / "pub.npz", "--eps", "1", "--steps", "2", "--batch-size", "1000",
                       "--epochs", "1", "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    images, g = card["mechanism"]["public_images"], card["guarantee"]
    assert images["images"] == 1000 and 0 < images["images_queried"] <= 1000 and images["max_rows_per_image"] >= 2
    sigma = card["mechanism"]["sigma"]
    assert g["per_image_epsilon"] == pytest.approx(gaussian.epsilon(g["delta"], sigma / np.sqrt(images["max_rows_per_image"])))
    assert g["per_image_epsilon"] > g["epsilon"] == pytest.approx(dpdfd.epsilon(sigma=sigma, steps=1, delta=g["delta"]))  # per answer
    assert cli("audit", out)[0] == 0
    assert cli("audit", out, "--max-per-image-eps", str(g["per_image_epsilon"] / 2))[0] == 1
    # a per-image ε below what m gives, or a dropped block, fails the audit (both copies forged, model hash unchanged);
    # m itself is a fact about the public images, not the events: lowering it together with the ε needs a signature to catch
    low = _rewrite_card(out, tmp_path / "low.onnx", lambda d: d["guarantee"].update(per_image_epsilon=d["guarantee"]["epsilon"]))
    code, outp, _ = cli("audit", low)
    assert code == 1 and "per_image_epsilon" in outp
    dropped = _rewrite_card(out, tmp_path / "dropped.onnx", lambda d: (d["mechanism"].pop("public_images"), d["guarantee"].pop("per_image_epsilon")))
    code, outp, _ = cli("audit", dropped)
    assert code == 1 and "public_images" in outp


@pytest.mark.slow
def test_per_image_targets_average_each_images_rows_and_keep_the_per_image_epsilon(tmp_path, cli):
    """--public-targets per-image: the student learns from per-image means of the released rows (post-processing), the card
    says so and still carries the per-image ε (m = the most views of one image), which the audit recomputes."""
    from dpconvert.accounting import gaussian

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "pub.npz", x=rng.integers(0, 256, (300, 8, 8)).astype(np.uint8))
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--public-data", tmp_path / "pub.npz", "--public-targets", "per-image", "--eps", "1",
                       "--batch-size", "6000", "--epochs", "20", "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    m, g = card["mechanism"], card["guarantee"]
    assert m["config"]["student_data"] == "sources" and "averaged per image" in m["query_source"] and m["batch_size"] == 6000
    assert m["public_images"]["max_rows_per_image"] >= 20  # ~20 views of each of 300 images
    assert g["per_image_epsilon"] == pytest.approx(gaussian.epsilon(g["delta"], m["sigma"] / np.sqrt(m["public_images"]["max_rows_per_image"])))
    assert cli("audit", out)[0] == 0
    code, _, err = cli("builtin:digits", "--public-targets", "per-image", "--eps", "1", "--out", tmp_path / "x.onnx")
    assert code != 0 and "needs --public-data" in err and not (tmp_path / "x.onnx").exists()


@pytest.mark.slow
def test_hugging_face_model_card(dpdfd_model, tmp_path, cli):
    import yaml

    readme = tmp_path / "README.md"
    assert cli("card", "export", dpdfd_model, "--format", "hf", "--out", readme, "--license", "apache-2.0")[0] == 0
    text = readme.read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["license"] == "apache-2.0" and "dp-query-level" in front["tags"] and "differential-privacy" not in front["tags"] and "dp-scope-query" in front["tags"]
    assert "# Privacy card" in text and "dpconvert audit" in text
    assert cli("card", "export", dpdfd_model, "--format", "pdf", "--out", tmp_path / "x.md")[0] == 1
    # with evaluation data, the accuracy goes into model-index, labelled as outside the guarantee
    assert cli("builtin:digits", "--eps", "1", *FAST, "--eval-data", "builtin:digits", "--out", tmp_path / "e.onnx")[0] == 0
    assert cli("card", "export", tmp_path / "e.onnx.card.json", "--out", readme)[0] == 1  # never overwritten silently
    assert cli("card", "export", tmp_path / "e.onnx.card.json", "--out", readme, "--force")[0] == 0
    front = yaml.safe_load(readme.read_text().split("---\n")[1])
    metric = front["model-index"][0]["results"][0]["metrics"][0]
    assert metric["type"] == "accuracy" and 0 < metric["value"] <= 1 and "not covered" in metric["name"]


def test_audit_reads_a_hub_layout_folder(dpdfd_model, tmp_path, cli):
    """README.md (card export --format hf) + the model file: the card is read from the README when the model has no
    other copy; copies must agree; an edited README card fails."""
    import shutil

    import onnx

    hub = tmp_path / "hub"
    hub.mkdir()
    proto = onnx.load(dpdfd_model)
    del proto.metadata_props[:]  # no embedded card
    onnx.save(proto, hub / "model.onnx")
    assert cli("audit", hub)[0] == 1  # no card anywhere yet
    assert cli("card", "export", dpdfd_model, "--format", "hf", "--out", hub / "README.md")[0] == 0
    code, outp, _ = cli("card", "verify", hub / "model.onnx")
    assert code == 0 and "card present: README.md" in outp
    text = (hub / "README.md").read_text()
    (hub / "README.md").write_text(text.replace('"scope": "query"', '"scope": "record"', 1))
    assert cli("audit", hub)[0] == 1
    shutil.copy(dpdfd_model, hub / "model.onnx")  # embedded copy back: README (edited) and embedded disagree
    code, outp, _ = cli("card", "verify", hub / "model.onnx")
    assert code == 1 and "copies agree" in outp


@pytest.mark.slow
def test_timings_that_scale_with_the_private_set_stay_off_the_card(tmp_path, cli):
    code, outp, err = cli("builtin:digits", *PKNN_FAST, "--public-data", "builtin:digits", "--eps", "8", "--profile", "--out", tmp_path / "s.onnx")
    assert code == 0, err
    assert "time per phase" not in outp and "--show-timings" in outp  # console logs are often public too
    code, outp, err = cli("builtin:digits", *PKNN_FAST, "--public-data", "builtin:digits", "--eps", "8", "--show-timings", "--out", tmp_path / "t.onnx")
    assert code == 0 and "time per phase" in outp  # the operator sees them when asking
    run = json.loads((tmp_path / "s.onnx.card.json").read_text())["run"]
    assert "phase_seconds" not in run and "items_per_second" not in run and "not recorded" in run["timings"]
