"""Data-free students worth shipping: the natural-image prior (augmented crops of bundled public photographs) and the
verdict a run prints and carries on its card from released quantities only."""

from __future__ import annotations

import json

import pytest
import torch

from dpconvert.distill.verdict import judge
from dpconvert.io.spec import InputSpec


def test_a_skewed_student_is_called_weak_and_a_spread_one_is_not():
    skewed = judge([91, 2754, 114, 977, 4, 33, 4, 3, 3, 113], sigma=3.73, answers_per_target=1)  # a real CIFAR-10 model on the random-field prior
    assert skewed.weak and skewed.classes_covered == 5 and "cover 5 of 10 classes" in skewed.note and "`public_data`" in skewed.note
    assert skewed.target_noise_to_signal == pytest.approx(10 * 3.73 ** 2, rel=1e-3)  # one row: K·σ²
    spread = judge([420, 283, 550, 1547, 204, 72, 181, 110, 96, 633], sigma=3.73, answers_per_target=400)
    assert not spread.weak and spread.classes_covered == 9  # 72 of 4 096 is under 1/(5K) and "`eval_data`" in spread.note
    assert spread.target_noise_to_signal == pytest.approx(10 * 3.73 ** 2 / 400, rel=1e-3)
    assert judge([100] * 10, sigma=0.0, answers_per_target=1).target_noise_to_signal == 0


def test_the_natural_prior_is_deterministic_sized_and_names_its_images():
    from dpconvert.generators import PRIORS, create_generator
    from dpconvert.generators.natural_images import DESCRIPTION, IMAGES

    spec = InputSpec(3, 32, 32, 10, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    prior = create_generator("natural_crops", spec)
    z = torch.randn(300, prior.nz, generator=torch.Generator().manual_seed(1))
    x = prior(z)
    assert x.shape == (300, 3, 32, 32) and torch.equal(x, prior(z))
    pixels = x * 0.25 + 0.5
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5 and pixels.std() > 0.1
    assert len({hash(p.numpy().tobytes()) for p in x}) == 300  # every draw a distinct crop
    assert "natural_crops" in PRIORS
    for image in IMAGES:
        assert image.name in DESCRIPTION and image.licence in DESCRIPTION
    grey = create_generator("natural_crops", InputSpec(1, 28, 28, 10, mean=(0.0,), std=(1.0,)))
    assert grey(torch.randn(8, grey.nz)).shape == (8, 1, 28, 28)


def test_the_prior_mixture_renders_each_row_by_its_family_and_names_both():
    """`fields_and_crops`: Φ(z₀) picks the family (½ each); the rest of z is that family's own latent, so each row is
    exactly what the family itself renders, and the card's description names both (the photographs' licences too)."""
    from dpconvert.generators import PRIORS, create_generator
    from dpconvert.generators.natural_images import IMAGES

    spec = InputSpec(3, 32, 32, 10, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    mix, fields, crops = (create_generator(n, spec) for n in ("fields_and_crops", "framed_fields", "natural_crops"))
    z = torch.randn(400, mix.nz, generator=torch.Generator().manual_seed(3))
    x, which = mix(z), mix.family(z)
    assert torch.equal(x, mix(z)) and mix.nz == 1 + max(fields.nz, crops.nz)
    assert 0.4 < which.float().mean() < 0.6
    for k, part in enumerate((fields, crops)):
        rows = which == k
        assert torch.allclose(x[rows], part(z[rows, 1:1 + part.nz]))
    assert PRIORS["framed_fields"] in PRIORS["fields_and_crops"]
    assert all(i.name in PRIORS["fields_and_crops"] and i.licence in PRIORS["fields_and_crops"] for i in IMAGES)


def test_a_default_run_prints_the_verdict_and_its_card_carries_it(cli, tmp_path):
    code, out, err = cli("builtin:digits", "--steps", "1", "--batch-size", "1500", "--epochs", "1", "--out", tmp_path / "s.onnx")
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    v = card["expected_utility"]
    assert v["num_classes"] == 10 and v["queries"] == 4096 and 0 <= v["classes_covered"] <= 10
    assert "verdict" in out and ("expect a weak student" in out) == v["weak"]
    assert ("expect a weak student" in " ".join(card["warnings"])) == v["weak"]
    assert "Expected utility" in (tmp_path / "s.onnx.card.md").read_text()
    code, _, err = cli("audit", tmp_path / "s.onnx")
    assert code == 0, err


@pytest.mark.parametrize("height,width", [(8, 8), (28, 28), (32, 20), (64, 64)])
def test_the_sampling_grid_is_torchs_affine_grid(height, width):
    """generators/sampling_grid.affine_grid replaces F.affine_grid (4–8× slower) in every prior: same grid, so the same
    views, up to float rounding."""
    import torch.nn.functional as F

    from dpconvert.generators.sampling_grid import affine_grid, translation_grid

    theta = torch.randn(37, 2, 3, generator=torch.Generator().manual_seed(0))
    expected = F.affine_grid(theta, [37, 3, height, width], align_corners=False)
    assert affine_grid(theta, height, width).shape == expected.shape
    assert torch.allclose(affine_grid(theta, height, width), expected, atol=1e-5)
    dx, dy = torch.rand(37) - 0.5, torch.rand(37) - 0.5
    shift = torch.zeros(37, 2, 3)
    shift[:, 0, 0] = shift[:, 1, 1] = 1.0
    shift[:, 0, 2], shift[:, 1, 2] = dx, dy
    assert torch.allclose(translation_grid(37, height, width, dx, dy), F.affine_grid(shift, [37, 1, height, width], align_corners=False), atol=1e-6)
