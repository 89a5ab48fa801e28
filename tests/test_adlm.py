"""The Adaptive Laplace Mechanism (corrected): sensitivities by brute force, Laplace noise as recorded, ε against
dp_accounting, the card and the audit."""

from __future__ import annotations

import json
import math

import pytest
import torch
from scipy import stats

from dpconvert.accounting import LaplaceAccountant
from dpconvert.mechanisms.adlm import AdaptiveLaplace, class_sums, laplace
from dpconvert.students.scatternet import PrototypeStudent


def _records(n=40, d=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, d, generator=g) ** 3 * torch.randint(0, 1000, (n, 1), generator=g)).double()  # wildly different scales
    x[0] = 0.0  # an all-zero record
    x[1, 0] = 1e6  # one huge coordinate
    return x, torch.randint(0, 4, (n,), generator=g)


@pytest.mark.parametrize("weights", ["uniform", "skewed"])
def test_class_sum_sensitivity_is_one_by_brute_force(weights):
    """Remove each record in turn (add/remove adjacency): the released K×d class sums move by ≤ 1 in L1."""
    g, y = _records()
    w = torch.ones(g.shape[1], dtype=g.dtype) if weights == "uniform" else torch.linspace(0.01, 5.0, g.shape[1], dtype=g.dtype)
    psi = PrototypeStudent.normalise(g, w)
    full = class_sums(psi, y, 4)
    worst = max((full - class_sums(torch.cat([psi[:i], psi[i + 1:]]), torch.cat([y[:i], y[i + 1:]]), 4)).abs().sum().item()
                for i in range(len(g)))
    assert worst <= 1.0  # exactly: the mechanism works in float64 with a rounding margin
    assert worst > 0.99  # the bound is tight: one record's row has L1 norm exactly 1


def test_normalisation_is_per_record():
    """Changing one record never changes another record's features."""
    g, _ = _records()
    w = torch.linspace(0.1, 2.0, g.shape[1], dtype=g.dtype)
    before = PrototypeStudent.normalise(g, w)
    g2 = g.clone()
    g2[5] *= 1000
    after = PrototypeStudent.normalise(g2, w)
    assert torch.equal(torch.cat([before[:5], before[6:]]), torch.cat([after[:5], after[6:]]))


def test_laplace_sampler_has_the_recorded_scale():
    x = laplace((200_000,), 2.5, torch.Generator().manual_seed(0)).numpy()
    assert stats.kstest(x, stats.laplace(scale=2.5).cdf).pvalue > 1e-3


def test_the_noise_that_ran_is_the_noise_on_the_card():
    """Releases of all-zero sums are pure noise: per-entry std √2·b with b = 1/ε, and the events say b and Δ₁ = 1."""
    acc = LaplaceAccountant()
    mech = AdaptiveLaplace(eps_relevance=0.2, eps_coefficients=0.8, relevance_power=1.0, accountant=acc,
                           noise=torch.Generator().manual_seed(1))
    noise = mech.release(torch.zeros(100, 500), 0.8)
    assert noise.std().item() == pytest.approx(math.sqrt(2) / 0.8, rel=0.02)
    assert acc.state_dict()["events"] == [{"mechanism": "laplace", "params": {"scale": 1 / 0.8, "l1_sensitivity": 1.0}, "count": 1}]


def test_epsilon_matches_dp_accounting():
    """Sequential composition of the two releases = dp_accounting's PLD of two Laplace mechanisms (at δ → 0)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    acc = LaplaceAccountant()
    acc.record("laplace", scale=1 / 0.1, l1_sensitivity=1.0)
    acc.record("laplace", scale=1 / 0.9, l1_sensitivity=1.0)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.ComposedDpEvent([dp_accounting.LaplaceDpEvent(10.0), dp_accounting.LaplaceDpEvent(1 / 0.9)]))
    assert acc.epsilon(delta=0.0) == pytest.approx(1.0)
    assert acc.epsilon(delta=0.0) == pytest.approx(pld.get_epsilon(1e-12), abs=1e-6)


@pytest.fixture(scope="module")
def adlm_card(tmp_path_factory):
    from tests.conftest import main_exit_code

    d = tmp_path_factory.mktemp("adlm")
    assert main_exit_code(["convert", "builtin:digits", "--private-data", "builtin:digits:train", "--method", "adlm", "--eps", "2",
                           "--out", d / "a.onnx", "--eval-data", "builtin:digits"]) == 0
    return d / "a.onnx"


def test_adlm_card_passes_audit_and_tampering_fails(adlm_card, cli):
    from dpconvert.auditing.card_checks import check_card

    data = json.loads(adlm_card.with_name("a.onnx.card.json").read_text())
    g = data["guarantee"]
    assert (g["epsilon"], g["delta"], g["scope"]) == (pytest.approx(2.0), 0.0, "record")
    assert len(data["mechanism"]["corrections"]) == 4
    assert check_card(data)[1] == []
    assert cli("audit", adlm_card)[0] == 0
    for path, value in [(("mechanism", "epsilon_relevance"), 0.01), (("guarantee", "epsilon"), 1.0), (("guarantee", "record_level_epsilon"), 0.5)]:
        forged = json.loads(json.dumps(data))
        forged[path[0]][path[1]] = value
        assert any(where.startswith(".".join(path)) for where, _ in check_card(forged)[1]), path
    forged = json.loads(json.dumps(data))
    forged["accounting"]["state"]["events"][1]["params"]["scale"] *= 10  # claims less noise-cost than ran
    assert check_card(forged)[1]


def test_adlm_refuses_what_it_cannot_use(tmp_path, cli):
    code, _, err = cli("convert", "builtin:digits", "--method", "adlm", "--private-data", "builtin:digits:train", "--student", "datalens_cnn",
                       "--out", tmp_path / "a.onnx")
    assert code == 1 and "--student" in err and not list(tmp_path.iterdir())
