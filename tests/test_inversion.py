"""The model-inversion audit (evidence, not a guarantee): the attack recovers images the model is sure of, the score
measures how close they come to the private records, and ``dpconvert audit --inversion`` reports both targets."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpconvert.auditing.inversion import invert, score


def test_the_attack_recovers_an_image_the_teacher_is_sure_of_for_every_class():
    from dpconvert.io.teachers import load_teacher

    teacher = load_teacher("builtin:digits")
    recovered, confidence, queries = invert(teacher, teacher.spec, steps=100, seed=0)
    assert recovered.shape == (10, *teacher.spec.shape) and 0 <= float(recovered.min()) and float(recovered.max()) <= 1
    assert float(confidence.min()) > 0.9 and queries == 100 * 24 * 10 + 10


def test_the_score_is_zero_for_a_recovered_training_image_and_large_for_noise():
    rng = np.random.default_rng(0)
    records = rng.random((200, 1, 8, 8))
    labels = np.repeat(np.arange(10), 20)
    copies = torch.from_numpy(np.stack([records[labels == c][0] for c in range(10)]))
    leaked = score(copies, torch.ones(10), records, labels, 0, 0, "model")
    assert leaked.nearest_distance == 0 and leaked.ratio == 0
    noise = score(torch.full((10, 1, 8, 8), 0.5), torch.ones(10), records, labels, 0, 0, "model")
    assert noise.nearest_distance > 0 and noise.ratio > leaked.ratio
    flat = records.reshape(200, -1)  # the chunked distances against the record × record matrix, computed in full
    medians = []
    for c in range(10):
        own = flat[labels == c]
        d = np.sqrt(((own[:, None] - own[None]) ** 2).mean(2))
        np.fill_diagonal(d, np.inf)
        medians.append(np.median(d.min(1)))
    assert noise.baseline == pytest.approx(np.mean(medians), rel=1e-5)


@pytest.mark.slow
def test_audit_reports_the_inversion_of_the_model_and_its_teacher(tmp_path, cli):
    out = tmp_path / "s.onnx"
    assert cli("builtin:digits", "--eps", "1", "--batch-size", "3000", "--epochs", "1", "--out", out)[0] == 0
    code, stdout, err = cli("audit", out, "--inversion", "--members", "builtin:digits:train", "--teacher", "builtin:digits",
                            "--json", tmp_path / "r.json")
    assert code == 0, err
    report = json.loads((tmp_path / "r.json").read_text())["model_inversion"][str(out)]
    assert set(report) == {"model", "teacher"} and all("not a DP guarantee" in r["kind"] for r in report.values())
    assert report["teacher"]["confidence"] > 0.9 and "model inversion" in stdout
    assert cli("audit", out, "--inversion")[0] == 2  # the score needs the private records
