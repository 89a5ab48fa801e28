"""DP-SGD: accounting against Opacus' own accountants, calibration, the noise that ran, the card and the audit."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpconvert.accounting import DpsgdAccountant, dpsgd
from dpconvert.accounting.calibrate import dpsgd_sigma
from dpconvert.mechanisms.dp_sgd import DpSgd

BIG = 1e7  # a count noise so large that its ε share vanishes: compare the steps alone with Opacus' accountants


@pytest.mark.parametrize("sigma,q,steps", [(1.1, 0.01, 1000), (6.34, 0.14, 140), (2.0, 0.05, 300)])
def test_pld_matches_opacus_prv_and_rdp_matches_opacus_rdp(sigma, q, steps):
    """Independent implementations: Opacus' PRV accountant (Gopi et al.) and its RDP accountant."""
    from opacus.accountants import PRVAccountant, RDPAccountant

    ours = dpsgd.epsilons(dpsgd.terms(sigma=sigma, sampling_rate=q, steps=steps, count_sigma=BIG), 1e-5)
    prv, rdp = PRVAccountant(), RDPAccountant()
    for acc in (prv, rdp):
        acc.history = [(sigma, q, steps)]
    assert ours["pld"] == pytest.approx(prv.get_epsilon(1e-5), rel=0.03)
    assert ours["rdp"] == pytest.approx(rdp.get_epsilon(1e-5), rel=0.05)
    assert ours["epsilon"] == min(ours["pld"], ours["rdp"])


def test_the_noisy_count_is_charged():
    base = dpsgd.epsilons(dpsgd.terms(sigma=3.0, sampling_rate=0.1, steps=100, count_sigma=BIG), 1e-5)["epsilon"]
    with_count = dpsgd.epsilons(dpsgd.terms(sigma=3.0, sampling_rate=0.1, steps=100, count_sigma=5.0), 1e-5)["epsilon"]
    assert with_count > base + 0.01


@settings(max_examples=8, deadline=None)
@given(eps=st.floats(0.3, 4.0), q=st.floats(0.02, 0.3), epochs=st.integers(1, 10))
@pytest.mark.slow
def test_calibrated_sigma_never_overshoots_and_is_nearly_smallest(eps, q, epochs):
    steps = epochs * int(1 / q)
    sigma = dpsgd_sigma(eps=eps, delta=1e-5, sampling_rate=q, steps=steps, count_sigma=100.0)
    def eps_of(s):
        return dpsgd.epsilons(dpsgd.terms(sigma=s, sampling_rate=q, steps=steps, count_sigma=100.0), 1e-5)["epsilon"]
    assert eps_of(sigma) <= eps
    assert eps_of(sigma * 0.98) > eps


def _linear_fit(sigma, clip=0.5, lr=1.0, seed=0):
    """One noisy step of a zero-initialised linear model; σ_n ≈ 0 so the expected lot size is q·n = 100 exactly."""
    torch.manual_seed(0)
    model = torch.nn.Linear(400, 10, bias=False)
    torch.nn.init.zeros_(model.weight)
    x, y = torch.randn(200, 400), torch.randint(0, 10, (200,))
    acc = DpsgdAccountant()
    mech = DpSgd(model, sigma=sigma, clip=clip, sampling_rate=0.5, steps=1, count_sigma=1e-9, lr=lr, momentum=0.0,
                 accountant=acc, noise=torch.Generator().manual_seed(seed))
    return mech.fit(x, y).weight.detach().clone(), acc


def test_the_noise_that_ran_is_the_noise_on_the_card():
    """Same generator seed → same lot; only the noise differs. (θ_noisy − θ_clean)·(q·n)/lr has std σ·C per
    coordinate, and the events carry that σ, C, q and one step."""
    sigma, clip, lr = 3.0, 0.5, 0.1
    noisy, acc = _linear_fit(sigma, clip, lr)
    clean, _ = _linear_fit(1e-12, clip, lr)
    noise = (noisy - clean).flatten() * 100 / lr
    assert noise.std().item() == pytest.approx(sigma * clip, rel=0.06)  # 4 000 coordinates: ±2.2 % per σ of the estimate
    assert abs(noise.mean().item()) < 4 * sigma * clip / math.sqrt(noise.numel())
    e = acc.state_dict()["events"]
    assert [ev["mechanism"] for ev in e] == ["gaussian_count", "subsampled_gaussian"]
    assert e[1]["params"] == {"sigma": sigma, "clip": clip, "sampling_rate": 0.5} and e[1]["count"] == 1


def test_noise_scale_follows_sigma_and_clip():
    """σ doubled (or C doubled) → exactly twice the noise: the optimizer draws N(0, σ²C²) from the same stream."""
    a, _ = _linear_fit(2.0, 0.5)
    b, _ = _linear_fit(4.0, 0.5)
    c, _ = _linear_fit(2.0, 1.0)
    clean_a, _ = _linear_fit(1e-12, 0.5)
    clean_c, _ = _linear_fit(1e-12, 1.0)
    assert torch.allclose(b - clean_a, 2 * (a - clean_a), rtol=1e-3, atol=1e-6)
    assert torch.allclose(c - clean_c, 2 * (a - clean_a), rtol=1e-3, atol=1e-6)


@pytest.fixture(scope="module")
def dpsgd_card(tmp_path_factory):
    from tests.conftest import main_exit_code

    d = tmp_path_factory.mktemp("dpsgd")
    code = main_exit_code(["convert", "builtin:digits", "--private-data", "builtin:digits:train", "--method", "dpsgd", "--eps", "1",
                           "--epochs", "2", "--out", d / "s.onnx", "--eval-data", "builtin:digits"])
    assert code == 0
    return d / "s.onnx"


@pytest.mark.slow
def test_dpsgd_card_passes_audit_and_tampering_fails(dpsgd_card, tmp_path, cli):
    from dpconvert.auditing.card_checks import check_card

    data = json.loads(dpsgd_card.with_name("s.onnx.card.json").read_text())
    assert data["guarantee"]["scope"] == "record" and data["guarantee"]["epsilon"] <= 1.0
    assert data["mechanism"]["teacher"].startswith("not queried")
    assert data["mechanism"]["steps"] == 2 * int(1 / 0.14)
    assert "n" not in json.dumps(data["mechanism"]["config"]).split('"')  # no private-set size on the card
    _, problems = check_card(data)
    assert problems == []
    code, _, _ = cli("audit", dpsgd_card)
    assert code == 0
    for path, value in [(("mechanism", "sigma"), data["mechanism"]["sigma"] * 2), (("mechanism", "steps"), 1),
                        (("guarantee", "epsilon"), 0.1), (("mechanism", "count_sigma"), 1e9)]:
        forged = json.loads(json.dumps(data))
        forged[path[0]][path[1]] = value
        _, problems = check_card(forged)
        assert any(where.startswith(".".join(path)) for where, _ in problems), path
    forged = json.loads(json.dumps(data))
    forged["accounting"]["state"]["events"][1]["count"] = 1
    _, problems = check_card(forged)
    assert problems


@pytest.mark.parametrize("extra,needle", [
    (["--public-data", "builtin:digits"], "public-data"),
    ([], "private-data"),
    (["--noise-multiplier", "3", "--sigma", "3"], "--sigma"),
    (["--sigma", "0.5"], "--sigma"),
])
def test_bad_dpsgd_inputs(tmp_path, cli, extra, needle):
    base = ["convert", "builtin:digits", "--method", "dpsgd", "--out", tmp_path / "s.onnx"]
    if needle != "private-data":
        base += ["--private-data", "builtin:digits:train"]
    code, _, err = cli(*base, *extra)
    assert code == 1 and needle in err
    assert not list(tmp_path.iterdir())


def test_scatternet_matches_kymatio():
    """The fixed-convolution scattering equals kymatio's FFT scattering inside the image (borders differ by padding)."""
    from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D

    from dpconvert.students.scatternet import ScatterNet

    x = torch.rand(16, 1, 28, 28)
    ours = ScatterNet(1, J=2)(x)
    ref = ScatteringTorch2D(J=2, shape=(28, 28), L=8)(x).reshape(16, 81, 7, 7)
    inner = (slice(None), slice(None), slice(1, -1), slice(1, -1))
    assert ((ours[inner] - ref[inner]).norm() / ref[inner].norm()).item() < 0.02


def test_plan_command_gives_the_sigma_the_run_used(dpsgd_card, cli):
    data = json.loads(dpsgd_card.with_name("s.onnx.card.json").read_text())
    code, out, _ = cli("plan", "--method", "dpsgd", "--eps", "1", "--epochs", "2", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["sigma"] == data["mechanism"]["sigma"] and plan["steps"] == data["mechanism"]["steps"]
    assert plan["epsilon"] == pytest.approx(data["guarantee"]["epsilon"])


def test_dpsgd_takes_the_one_name_for_the_noise_level(tmp_path):
    """`noise_multiplier` sets DP-SGD's σ as it sets DPDFD's (ε computed, no `eps`): the same run as `sigma`."""
    import dpconvert

    a = dpconvert.plan("dpsgd", noise_multiplier=3.0, epochs=1)
    b = dpconvert.plan("dpsgd", eps=50, sigma=3.0, epochs=1)
    assert a.sigma == b.sigma == 3.0 and a.epsilon == b.epsilon and a.calibrated is False
    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", method="dpsgd", private_data="builtin:digits:train", noise_multiplier=3.0,
                          epochs=1)
    assert r.card.data["mechanism"]["sigma"] == 3.0 and r.card.epsilon == pytest.approx(a.epsilon)
    assert [m.passed for m in dpconvert.audit([str(r.out)])] == [True]


def test_the_scatternet_default_is_bounded_by_the_features_it_keeps_per_record():
    """DP-SGD's ScatterNet student keeps every private record's scattering coefficients in memory; a teacher whose
    records would need more than SCATTER_MAX_FEATURES each (a 3×64×64 teacher's 60 000 records, 62 208 coefficients
    each, were killed for memory on 24 GB) gets the ScatterNet on its input average-pooled to ≤ 32 px, which keeps
    what a 3×32×32 record keeps; the count the bound is checked with is the count the student computes."""
    from dpconvert.io.spec import InputSpec
    from dpconvert.methods.dpsgd import SCATTER_MAX_FEATURES, default_student
    from dpconvert.students import create_student
    from dpconvert.students.scatternet import fixed_feature_count, reduction_factor

    for shape, expected in [((1, 28, 28), "scatternet_linear"), ((3, 32, 32), "scatternet_linear"),
                            ((3, 64, 64), "reduced_scatternet_linear"), ((3, 224, 224), "reduced_scatternet_linear"),
                            ((3, 100, 60), "reduced_scatternet_linear")]:
        spec = InputSpec(*shape, 10)
        assert default_student(spec, "cpu") == expected, shape
        assert (fixed_feature_count(spec) <= SCATTER_MAX_FEATURES) == (expected == "scatternet_linear")
        student = create_student(expected, spec)
        with torch.no_grad():
            kept = student.fixed_features(torch.rand(2, *spec.shape)).flatten(1).shape[1]
            assert student(torch.rand(2, *spec.shape)).shape == (2, 10)  # the model takes the teacher's input size
        pool = reduction_factor(spec) if expected.startswith("reduced") else 1
        assert kept == fixed_feature_count(spec, pool) <= SCATTER_MAX_FEATURES, shape
    assert fixed_feature_count(InputSpec(1, 28, 28, 10)) == 3969
