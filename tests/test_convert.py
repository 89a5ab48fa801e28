"""End to end through the CLI on the built-in teacher: ONNX + card whose ε the accountant recomputes."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime as ort
import numpy as np
import pytest

from dpconvert.accounting import ACCOUNTANTS, dpdfd
from dpconvert.mechanisms.noise import SECRET_RNG
from dpconvert.zoo_cards import PrivacyCard, extract_card, model_sha256

FAST = ["--steps", "2", "--batch-size", "1500", "--epochs", "1"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """One small conversion shared by the tests below (main form: no 'convert' word)."""
    from conftest import main_exit_code

    out = tmp_path_factory.mktemp("conv") / "student.onnx"
    assert main_exit_code(["builtin:digits", "--eps", "1", "--out", out, "--eval-data", "builtin:digits", *FAST]) == 0
    return out


def test_outputs_exist_and_card_is_valid(converted):
    card = PrivacyCard.read(str(converted) + ".card.json")
    assert (converted.parent / "student.onnx.card.md").read_text().startswith("---\ntags:\n- dp-query-level")  # a query-level student is not tagged differential-privacy
    assert card.scope == "query" and card.delta == 1e-5 and card.epsilon <= 1.0
    assert card.record_level_epsilon > card.epsilon
    assert card.data["utility"]["covered_by_guarantee"] is False
    assert 0.0 <= card.data["utility"]["student_accuracy"] <= 1.0
    assert not [p for p in converted.parent.iterdir() if p.name.endswith(".tmp")]
    mech = card.data["mechanism"]
    assert mech["distill_loss"] == "logits" and mech["config"]["student_target"] == "centred" and mech["config"]["zero_head"]


def test_paper_ce_loss_is_selectable(tmp_path, cli):
    code, _, err = cli("builtin:digits", "--distill-loss", "ce", "--out", tmp_path / "s.onnx", *FAST)
    assert code == 0, err
    cfg = PrivacyCard.read(tmp_path / "s.onnx.card.json").data["mechanism"]["config"]
    assert (cfg["distill_loss"], cfg["student_target"], cfg["zero_head"]) == ("ce", "score", False)


def test_card_epsilon_is_recomputed_from_its_own_parameters(converted):
    card = PrivacyCard.read(str(converted) + ".card.json").data
    acc = ACCOUNTANTS.get(card["accounting"]["accountant"])().load_state_dict(card["accounting"]["state"])
    assert acc.epsilon(delta=card["guarantee"]["delta"]) == pytest.approx(card["guarantee"]["epsilon"], rel=1e-12)
    m = card["mechanism"]
    assert acc.count("normalised_gaussian_release") == m["releases"] == 2
    assert acc.events[0].params == {"sigma": m["sigma"], "clip": m["clip"], "batch_size": m["batch_size"]}
    assert m["distinct_across_releases"] is True and m["max_answers_per_input"] == 1  # per-answer: two releases, the ε of one
    assert dpdfd.epsilon(sigma=m["sigma"], steps=1, delta=1e-5) == pytest.approx(card["guarantee"]["epsilon"])
    rec = dpdfd.epsilon(sigma=m["sigma"], steps=m["releases"], delta=1e-5, batch_size=m["batch_size"], scope="record")
    assert card["guarantee"]["record_level_epsilon"] == pytest.approx(rec)


def test_embedded_card_and_hash(converted):
    proto = onnx.load(str(converted))
    onnx.checker.check_model(proto, full_check=True)
    embedded = extract_card(proto)
    sidecar = PrivacyCard.read(str(converted) + ".card.json")
    assert embedded.data == sidecar.data
    assert model_sha256(proto) == sidecar.model_sha256
    sess = ort.InferenceSession(str(converted), providers=["CPUExecutionProvider"])
    out = sess.run(None, {sess.get_inputs()[0].name: np.zeros((3, 1, 8, 8), np.float32)})[0]
    assert out.shape == (3, 10)  # dynamic batch axis
    par = sidecar.data["export"]["parity"]
    assert par["max_abs_diff"] < 1e-4 and par["top1_agreement"] == 1.0


def test_same_seed_same_student(tmp_path, cli):
    hashes = []
    for name in ("a.onnx", "b.onnx"):
        code, _, err = cli("convert", "builtin:digits", "--out", tmp_path / name, "--seed", "3", "--seeded-noise", *FAST)
        assert code == 0, err
        hashes.append(PrivacyCard.read(tmp_path / f"{name}.card.json").model_sha256)
    assert hashes[0] == hashes[1]


@pytest.mark.slow
def test_noise_is_secret_by_default_and_seeded_noise_is_an_audited_opt_in(tmp_path, cli):
    """Default: the noise comes from OS entropy and no mechanism seed is on the card (same --seed, different noise).
    --seeded-noise: reproducible, flagged on the card, and the audit fails it unless --allow-seeded-noise."""
    cards = {}
    for name, extra in (("secret1.onnx", []), ("secret2.onnx", []), ("seeded.onnx", ["--seeded-noise"])):
        code, _, err = cli("convert", "builtin:digits", "--out", tmp_path / name, "--seed", "3", *extra, *FAST)
        assert code == 0, err
        cards[name] = PrivacyCard.read(tmp_path / f"{name}.card.json")
    seeded, s1 = cards["seeded.onnx"].data, cards["secret1.onnx"].data
    assert s1["mechanism"]["noise_secret"] is True and s1["mechanism"]["noise_rng"] == SECRET_RNG  # no mechanism seed written
    assert not any("`seeded_noise`" in w for w in s1["warnings"])
    assert cards["secret1.onnx"].model_sha256 != cards["secret2.onnx"].model_sha256  # same --seed, fresh noise
    assert seeded["mechanism"]["noise_secret"] is False and "seeded with 4" in seeded["mechanism"]["noise_rng"]
    assert any("`seeded_noise`" in w for w in seeded["warnings"])  # the card names the parameter
    assert s1["guarantee"]["epsilon"] == seeded["guarantee"]["epsilon"]  # same mechanism, same ε
    code, outp, _ = cli("audit", tmp_path / "seeded.onnx")
    assert code == 1 and "secret noise" in outp
    assert cli("audit", tmp_path / "seeded.onnx", "--allow-seeded-noise")[0] == 0
    code, outp, _ = cli("audit", tmp_path / "secret1.onnx", tmp_path / "secret2.onnx")
    assert code == 0, outp


def test_noise_multiplier_gives_computed_epsilon(tmp_path, cli):
    code, out, err = cli("builtin:digits", "--noise-multiplier", "20", "--out", tmp_path / "s.onnx", "--json", *FAST)
    assert code == 0, err
    card = json.loads(out)  # --json: stdout is the card only (plan and progress go to stderr)
    assert card["guarantee"]["epsilon"] == pytest.approx(dpdfd.epsilon(sigma=20.0, steps=1, delta=1e-5))
    assert card["accounting"]["calibrated"] is False


def test_interrupt_leaves_no_output(tmp_path, cli, monkeypatch):
    import dpconvert.io.export as export

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "parity", boom)
    code, _, err = cli("builtin:digits", "--out", tmp_path / "s.onnx", *FAST)
    assert code == 130
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_leaves_no_output(tmp_path, cli, monkeypatch):
    import dpconvert.zoo_cards.markdown as zc

    def disk_full(card):
        raise RuntimeError("disk full")

    monkeypatch.setattr(zc, "render_markdown", disk_full)  # fails after the model and JSON temps are written
    with pytest.raises(RuntimeError):
        from dpconvert import convert

        convert("builtin:digits", out=tmp_path / "s.onnx", releases=1, batch_size=500, epochs=1)
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("args,needle,exit_code", [  # 2: a malformed option, an unknown name or choice (usage); 1: the rest
    (["--out", "{d}/s.pt"], "must end in .onnx", 1),
    (["--out", "{d}/missing/s.onnx"], "does not exist", 1),
    (["--out", "{d}/s.onnx", "--eps", "0"], "--eps", 2),
    (["--out", "{d}/s.onnx", "--student", "resnet9000"], "unknown student architecture", 2),
    (["--out", "{d}/s.onnx", "--distill-loss", "mse"], "unknown --distill-loss 'mse'; choose one of: logits, ce, kd", 2),
    (["--out", "{d}/s.onnx", "--prior", "dafl"], "unknown --prior 'dafl'", 2),
    (["--out", "{d}/s.onnx", "--eval-data", "{d}/nope.npz"], "no such file", 1),
])
def test_bad_convert_inputs(tmp_path, cli, args, needle, exit_code):
    code, _, err = cli("builtin:digits", *[a.format(d=tmp_path) for a in args], *FAST)
    assert code == exit_code and needle in err, err
    assert err.strip().count("\n") == 0
    assert not list(tmp_path.glob("*.onnx*"))


def test_no_noise_needs_an_explicit_opt_in_and_fails_every_audit(tmp_path, cli):
    for flags in (["--noise-multiplier", "0"], ["--eps", "inf"]):
        code, _, err = cli("builtin:digits", *flags, "--out", tmp_path / "s.onnx", *FAST)
        assert code == 2 and "--no-privacy" in err and not list(tmp_path.iterdir())
    code, _, err = cli("builtin:digits", "--no-privacy", "--out", tmp_path / "s.onnx", *FAST)
    assert code == 0, err
    card = PrivacyCard.read(tmp_path / "s.onnx.card.json")
    assert card.data["guarantee"]["epsilon"] == "inf" and card.epsilon == float("inf")
    assert any("NOT differentially private" in w for w in card.data["warnings"])
    for policy in ([], ["--max-eps", "10"]):
        code, out, _ = cli("audit", tmp_path / "s.onnx", *policy)
        assert code == 1 and "differentially private" in out
    assert cli("builtin:digits", "--no-privacy", "--eps", "1", "--out", tmp_path / "t.onnx", *FAST)[0] == 2  # contradictory options: a usage error


def test_public_data_query_source_is_on_the_card(tmp_path, cli):
    out = tmp_path / "pub.onnx"
    code, _, err = cli("builtin:digits", "--method", "dpdfd", "--public-data", "builtin:digits", *FAST, "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "pub.onnx.card.json").read_text())
    assert "public images" in card["mechanism"]["query_source"] and "not data-free" in card["mechanism"]["query_source"]
    assert any("public query images" in n for n in card["guarantee"]["not_covered"])
    assert card["guarantee"]["scope"] == "query"


def test_public_image_source_is_deterministic_and_augments():
    import torch

    from dpconvert.generators.public_images import PublicImageSource

    imgs = torch.rand(10, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    src = PublicImageSource(imgs, subpixel=False)
    z = torch.randn(500, src.nz, generator=torch.Generator().manual_seed(1))
    x = src(z)
    assert x.shape == (500, 1, 8, 8) and torch.equal(x, src(z))
    exact = [(x[i] - imgs).flatten(1).abs().amax(1).min() < 1e-6 for i in range(len(x))]
    assert 0.002 < sum(exact) / len(x) < 0.05  # P(untouched) = 0.7 (no mixup) · 0.5 (no flip) · (1/5)² (no shift) = 0.014
    # sub-pixel shifts (the default): the same integer shifts are exact, and no view repeats
    smooth = PublicImageSource(imgs, mix_prob=0.0, flip=False)
    u = torch.tensor([0.5, 0.9])  # shift 0 and +1.6 px
    assert torch.allclose(smooth.shift(imgs[:1].expand(2, -1, -1, -1), u[:1].expand(2), u[:1].expand(2)), imgs[:1].expand(2, -1, -1, -1), atol=1e-6)
    views = smooth(torch.randn(5000, smooth.nz, generator=torch.Generator().manual_seed(2)))
    assert len(torch.unique(views.flatten(1), dim=0)) == 5000


def test_public_blends_count_both_images():
    """A fixed blend of two public images is a view of both: the per-image ε must count its rows for each."""
    import torch

    from dpconvert.generators.public_images import PublicImageSource

    imgs = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    src = PublicImageSource(imgs, mix_prob=0.0, blends=20)
    z = torch.randn(400, src.nz, generator=torch.Generator().manual_seed(1))
    base, pairs = src.base_index(z), src.sources(z)
    blend = base >= 6
    assert blend.any() and (~blend).any()
    assert torch.equal(pairs[~blend, 0], base[~blend]) and (pairs[~blend, 1] == -1).all()
    k = base[blend] - 6
    a, b = src.pairs[k, 0], src.pairs[k, 1]
    assert torch.equal(pairs[blend, 0], a) and torch.equal(pairs[blend, 1], torch.where(a == b, -1, b))
    w = src.weights[k].view(-1, 1, 1, 1)
    assert torch.allclose(src.base_images(base[blend]), w * imgs[a] + (1 - w) * imgs[b])


def test_every_run_is_profiled(tmp_path, cli):
    """The summary and the card's run block show where the time went (never asserted: only that each phase is there)."""
    code, outp, err = cli("builtin:digits", "--out", tmp_path / "s.onnx", "--profile", "--eval-data", "builtin:digits", *FAST)
    assert code == 0, err
    assert "time per phase" in outp and "teacher forward" in outp and "throughput" in outp
    run = PrivacyCard.read(tmp_path / "s.onnx.card.json").data["run"]
    assert {"queries", "teacher forward", "release", "student training", "export", "parity", "evaluation"} <= set(run["phase_seconds"])
    assert run["items_per_second"]["teacher forward"] > 0 and run["peak_rss_mib"] > 0 and run["torch_threads"] >= 1
    assert run["teacher_runtime"].startswith("onnxruntime")  # the built-in torch teacher, exported and checked (io/teacher_runtime.py)


# ------------------------------------------------------------------ outputs that cannot be lost
def test_an_unwritable_out_fails_before_any_work(tmp_path, cli, monkeypatch):
    import dpconvert.io.teachers as teachers

    def never(*a, **k):
        raise AssertionError("the teacher was loaded before the output was checked")

    monkeypatch.setattr(teachers, "load_teacher", never)  # before any work: not even the teacher is loaded
    code, _, err = cli("builtin:digits", "--eps", "1", "--out", "/sys/student.onnx")
    assert code == 1 and err.strip().count("\n") == 0 and "cannot write" in err and "--out" in err
    assert not Path("/sys/student.onnx").exists()


@pytest.mark.slow
def test_an_existing_out_is_replaced_only_with_force(tmp_path, cli):
    out = tmp_path / "s.onnx"
    assert cli("builtin:digits", "--out", out, *FAST)[0] == 0
    before = out.read_bytes()
    code, _, err = cli("builtin:digits", "--out", out, *FAST, "--seed", "1")
    assert code == 1 and "--force" in err and out.read_bytes() == before
    assert cli("builtin:digits", "--out", out, *FAST, "--seed", "1", "--force")[0] == 0 and out.read_bytes() != before


@pytest.mark.slow
def test_a_full_disk_leaves_no_file(tmp_path):
    """The conversion runs, then writing the ONNX model fails (a file-size limit stands in for a full disk): one line,
    exit 1, and no file at all in the folder (the temp files were registered before they were created)."""
    import subprocess
    import sys

    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000)); "
              f"sys.argv = ['dpconvert', 'builtin:digits', '--out', {str(tmp_path / 's.onnx')!r}, {', '.join(map(repr, FAST))}]; "
              "from dpconvert.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "cannot write" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_teacher_runtime_for_a_method_that_never_queries_the_teacher_is_an_error(tmp_path, cli):
    """`--teacher-runtime onnxruntime` moves the teacher that answers DPDFD's queries; DP-SGD never asks one, so the
    flag would do nothing: one line naming the fix, before any work, and no file."""
    code, _, err = cli("builtin:digits", "--method", "dpsgd", "--private-data", "builtin:digits:train", "--epochs", "1",
                       "--teacher-runtime", "onnxruntime", "--out", tmp_path / "s.onnx")
    assert code == 1 and "teacher-runtime" in err and "dpdfd" in err and err.strip().count("\n") == 0, err
    assert not list(tmp_path.iterdir())
