"""The embedding critic of the DP-critic GAN: one Gaussian release of unit-norm per-record vectors. Its sensitivity,
its noise against the calibrated σ and an independent Gaussian-mechanism formula, the release as the only path from
private records to the generator, and the audit of its card."""

from __future__ import annotations

import json
import math

import pytest
import torch

from dpconvert.accounting import DpganAccountant
from dpconvert.generators import create_generator
from dpconvert.io.spec import InputSpec
from dpconvert.mechanisms.dp_mean_embedding import EmbeddingGanTraining, RandomFourierFeatures, noisy_embedding, record_vectors

SPEC = InputSpec(1, 8, 8, 10, mean=(0.3,), std=(0.4,))


def _phi(features=50):
    return RandomFourierFeatures(SPEC, features, length_scale=2.0, seed=0)


def test_every_record_vector_has_norm_at_most_one_whatever_it_holds():
    x = torch.cat([torch.randn(20, *SPEC.shape), 1e30 * torch.ones(1, *SPEC.shape), torch.full((1, *SPEC.shape), float("nan")),
                   torch.full((1, *SPEC.shape), float("inf"))])
    norms = record_vectors(_phi(), x).norm(dim=1)
    assert norms.max() <= 1.0 and norms[:20].min() > 1 - 1e-9  # the bound is attained: the sensitivity is 1, not less
    assert norms[-2:].tolist() == [0.0, 0.0]  # a non-finite record contributes nothing


def test_adding_one_record_moves_the_release_by_at_most_one():
    """Neighbouring data sets under the same noise draw: the difference is the added record's vector, norm ≤ 1."""
    phi, x, y = _phi(), torch.randn(30, *SPEC.shape), torch.randint(0, 10, (30,))
    a = noisy_embedding(phi, x, y, 10, sigma=1.0, noise=torch.Generator().manual_seed(5))
    b = noisy_embedding(phi, torch.cat([x, 3 * torch.randn(1, *SPEC.shape)]), torch.cat([y, torch.tensor([4])]), 10, sigma=1.0,
                        noise=torch.Generator().manual_seed(5))
    diff = b - a
    assert diff.norm() <= 1.0 + 1e-9 and diff[torch.arange(10) != 4].abs().max() == 0


def test_the_noise_is_the_calibrated_sigma_and_epsilon_matches_the_exact_gaussian_mechanism():
    """A drift in the noise (scale, or noise on the wrong quantity) or in the accounting fails here: the empirical
    noise std against σ, and the card's ε against the exact (ε, δ) curve of the Gaussian mechanism (Balle & Wang
    2018, Theorem 8), computed with SciPy, not with the accountant."""
    from scipy.stats import norm

    from dpconvert.methods.dpgan import CRITICS, GanOptions

    sigma = CRITICS.get("embedding").sigma(GanOptions(), 0.5, 1e-5)
    phi, x, y = _phi(features=2000), torch.randn(50, *SPEC.shape), torch.randint(0, 10, (50,))
    clean = noisy_embedding(phi, x, y, 10, sigma=0.0, noise=torch.Generator().manual_seed(1))
    noise = noisy_embedding(phi, x, y, 10, sigma=sigma, noise=torch.Generator().manual_seed(1)) - clean
    assert noise.std().item() == pytest.approx(sigma, rel=0.03) and noise.mean().abs().item() < 0.05 * sigma
    acc = DpganAccountant()
    acc.record("subsampled_gaussian", sigma=sigma, clip=1.0, sampling_rate=1.0)
    eps = acc.epsilon(delta=1e-5)
    exact_delta = norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)
    assert eps <= 0.5 and exact_delta <= 1e-5 and exact_delta > 0.9e-5  # a true bound, and not a loose one


def _training(cls=EmbeddingGanTraining):
    torch.manual_seed(0)
    return cls(create_generator("dcgan_small", SPEC, nz=16), SPEC, sigma=1.0, features=50, length_scale=2.0, steps=3, fake_batch=20,
               lr=1e-2, accountant=DpganAccountant(), noise=torch.Generator().manual_seed(1), train_rng=torch.Generator().manual_seed(2),
               feature_seed=0)


class LeakyEmbeddingTraining(EmbeddingGanTraining):
    """Fits the generator to the clean embedding as well (an un-noised path from the records): must be caught."""

    def fit(self, x, y, on_step=None):
        self.clean = noisy_embedding(self.phi, x, y, self.spec.num_classes, sigma=0.0, noise=self.noise)
        return super().fit(x, y, on_step)

    def fit_generator(self, released, on_step=None):
        return super().fit_generator(released + self.clean, on_step)


@pytest.mark.parametrize("cls,leaks", [(EmbeddingGanTraining, False), (LeakyEmbeddingTraining, True)])
def test_the_release_is_the_only_path_from_private_data_to_the_generator(cls, leaks, monkeypatch):
    """With the release fixed, every record changed must leave the generator exactly as it was."""
    import dpconvert.mechanisms.dp_mean_embedding as m

    released = noisy_embedding(_phi(), torch.randn(40, *SPEC.shape), torch.randint(0, 10, (40,)), 10, sigma=1.0,
                               noise=torch.Generator().manual_seed(3))
    real = m.noisy_embedding

    def fixed_release(phi, x, y, k, *, sigma, noise, chunk=4096):
        return real(phi, x, y, k, sigma=0.0, noise=noise) if sigma == 0.0 else released.clone()
    monkeypatch.setattr(m, "noisy_embedding", fixed_release)
    x_a, y_a = torch.randn(40, *SPEC.shape), torch.randint(0, 10, (40,))
    weights = []
    for x, y in ((x_a, y_a), (x_a + 5.0, y_a.flip(0))):
        t = _training(cls)
        weights.append([p.detach().clone() for p in t.fit(x, y).parameters()])
    same = all(torch.equal(a, b) for a, b in zip(*weights))
    assert same is not leaks


def test_one_event_is_recorded_for_the_one_release():
    t = _training()
    t.fit(torch.randn(40, *SPEC.shape), torch.randint(0, 10, (40,)))
    assert t.accountant.state_dict()["events"] == [
        {"mechanism": "subsampled_gaussian", "params": {"sigma": 1.0, "clip": 1.0, "sampling_rate": 1.0}, "count": 1}]


@pytest.mark.slow
def test_pknn_on_embedding_gan_queries_end_to_end_and_a_forged_card_is_caught(tmp_path, cli):
    from dpconvert.auditing.card_checks import check_card

    out = tmp_path / "g.onnx"
    code, stdout, err = cli("convert", "builtin:digits", "--method", "pknn", "--private-data", "builtin:digits:train", "--query-generator", "dpgan",
                            "--gan-generator-steps", "30", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "2",
                            "--queries", "300", "--eps", "4", "--out", out)
    assert code == 0, err
    data = json.loads(out.with_name("g.onnx.card.json").read_text())
    block = data["mechanism"]["query_generator"]["dpgan"]
    assert block["critic"] == "embedding" and block["steps"] == 1 and block["generator_steps"] == 30
    assert data["guarantee"]["scope"] == "record" and data["guarantee"]["epsilon"] <= 4.0 and check_card(data)[1] == []
    forged = json.loads(json.dumps(data))
    for e in forged["accounting"]["state"]["events"]:
        if e["mechanism"] == "subsampled_gaussian":  # replayed as a subsampled step, the release would look ~free
            e["params"]["sampling_rate"] = 0.01
    forged["mechanism"]["query_generator"]["dpgan"]["sampling_rate"] = 0.01
    assert any(w == "accounting.state.events" for w, _ in check_card(forged)[1])


@pytest.mark.slow
def test_label_noise_is_calibrated_against_the_composed_bound():
    """σ2 spends what the joint RDP composition leaves: the planned composed ε meets the target (not ≈ 0.7 of it, as
    calibrating the labels alone by basic composition did), and never exceeds it."""
    from dpconvert.accounting import DpganPknnAccountant
    from dpconvert.methods.pknn import PknnOptions, PrivateKnn
    from dpconvert.options import RunOptions

    acc = DpganPknnAccountant()
    acc.record("subsampled_gaussian", sigma=9.04, clip=1.0, sampling_rate=1.0)
    run, opts = RunOptions(eps=1.0, delta=1e-5), PknnOptions(sigma1=80.0)
    _, plan = PrivateKnn()._joint_budget(run, opts, acc, 10, 5000)
    assert 0.99 <= plan.epsilon <= 1.0 and plan.calibrated
    planned = DpganPknnAccountant(events=list(acc.events))
    planned.record("pknn_screening", count=5000, k=300, num_classes=10, sigma1=80.0, threshold=120.0, sampling_rate=0.1)
    planned.record("pknn_argmax", count=5000, sigma2=plan.sigma2, sampling_rate=0.1, num_classes=10)
    assert planned.epsilon(delta=1e-5) <= 1.0  # recomputed from the events, independently of the plan
    basic = PrivateKnn().label_plan(opts, 10, 1.0 - acc.parts()[0].epsilon(delta=5e-6), 5e-6, 5000)
    assert plan.sigma2 < basic.sigma2  # less label noise for the same guarantee
