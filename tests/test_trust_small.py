"""The smaller findings of "The card must never lie, round 3" (item 6), each a test that failed before its fix."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import onnx
import pytest
import torch

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]
PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release"


def test_a_huge_batch_size_is_one_line_from_the_plan(cli, tmp_path):
    for args in (["builtin:digits", "--out", tmp_path / "s.onnx"], ["plan"]):
        code, _, err = cli(*args, "--batch-size", "1000000000000")
        assert code != 0 and "give --batch-size" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s.onnx").exists()


class CouplesAbove40(torch.nn.Module):
    """Answers each row on its own up to 40 rows; above that, subtracts the batch mean (batch statistics)."""

    def forward(self, x):
        y = x.flatten(1)[:, :10] * 3.0
        return y - y.mean(0, keepdim=True) if len(x) > 40 else y


def test_a_teacher_that_couples_rows_only_in_large_batches_is_refused():
    from dpconvert.errors import DpconvertError
    from dpconvert.mechanisms.teacher_checks import PROBE_SIZE, check_teacher

    teacher = CouplesAbove40().eval()
    x = torch.randn(256, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    check_teacher(teacher, x[:PROBE_SIZE])  # the 32-row probe alone cannot see it
    with pytest.raises(DpconvertError, match="when 256 inputs are answered together"):
        check_teacher(teacher, x[:PROBE_SIZE], x)
    check_teacher(lambda v: v.flatten(1)[:, :10] * 3.0, x[:PROBE_SIZE], x)  # a row-independent teacher passes


def _small_sigma(card: dict, sigma: float) -> dict:
    c = copy.deepcopy(card)
    for e in c["accounting"]["state"]["events"]:
        if "sigma" in e["params"]:
            e["params"]["sigma"] = sigma
    return c


@pytest.mark.parametrize("name", ["dpdfd", "dpdfd_composed", "dpsgd"])
def test_a_crafted_tiny_sigma_card_is_audited_in_bounded_memory(name):
    """σ = 0.02 with a cross-check block once cost a MemoryError (a PLD grid growing as 1/σ²): the grid is now capped, so
    the forgery is replayed and fails on its ε instead."""
    from dpconvert.auditing.card_checks import check_card

    card = json.loads((PREVIOUS / f"{name}.card.json").read_text())
    true, problems = check_card(_small_sigma(card, 0.02))
    assert true["epsilon"] > 100 and "guarantee.epsilon" in {w for w, _ in problems}


def test_the_coarsened_pld_grid_still_bounds_from_above():
    from dpconvert.accounting import composition, gaussian

    for sigma in (0.4, 0.1, 0.03):
        exact = gaussian.epsilon(1e-5, sigma)  # the analytic Gaussian ε of one release (exact)
        assert exact <= composition.epsilon([(sigma, 1, None)], 1e-5) <= exact * 1.05


def test_the_console_shows_no_unnoised_teacher_statistics_by_default(cli, tmp_path):
    code, out, err = cli("builtin:digits", *FAST, "--out", tmp_path / "a.onnx")
    assert code == 0 and "agreement 0." not in out + err  # the ONNX parity line's "top-1 agreement" compares the student with itself
    code, out, err = cli("builtin:digits", *FAST, "--out", tmp_path / "b.onnx", "--teacher-diagnostics")
    assert code == 0 and "agreement 0." in out + err


def _edited_copy(signed: Path, tmp: Path, edit) -> Path:
    dst = tmp / "s.onnx"
    for suffix in ("", ".card.json", ".card.md"):
        shutil.copy(f"{signed / 's.onnx'}{suffix}", f"{dst}{suffix}")
    proto = onnx.load(str(dst))
    edit(proto)
    onnx.save(proto, str(dst))
    return dst


@pytest.mark.parametrize("edit, why", [
    (lambda p: p.metadata_props.add(key="privacy", value="epsilon=0.01"), "speaks of privacy"),
    (lambda p: setattr(p, "doc_string", "certified ε = 0.01 differentially private"), "speaks of privacy"),
    (lambda p: setattr(p, "doc_string", "trained on our best data"), "not covered by the signature"),
])
def test_a_signed_model_carries_no_unsigned_text(signed, tmp_path, cli, edit, why):
    import dpconvert

    gate = dict(trusted_keys=str(signed / "keys"), require_signature=True)
    assert dpconvert.audit(signed / "s.onnx", **gate)[0].passed
    model = _edited_copy(signed, tmp_path, edit)
    result = dpconvert.audit(model, **gate)[0]
    assert not result.passed and any(why in f for f in result.failures()), result.failures()
