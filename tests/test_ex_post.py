"""The ex-post expected privacy-loss estimate ("Generating Artificial Data for Private Deep Learning"): an empirical
statistic of one data set, published only on request in the data card's ``empirical`` block — never as an ε, never
in the guarantee — and the audit fails a card that moves it anywhere else or drops the warning that goes with it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpconvert.mechanisms.ex_post import NEIGHBOURS, estimate


def _memorised(n_private: int = 300, copies: int = 1, noise: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    private = rng.random((n_private, 16))
    synthetic = np.repeat(private, copies, axis=0) + noise * rng.standard_normal((n_private * copies, 16))
    return private, synthetic


def test_a_generator_that_copies_its_records_shows_a_larger_loss_than_one_that_does_not():
    """Synthetic samples that are near-copies of the private records (a memorising GAN, three per record): removing a
    record's three nearest samples leaves a hole, a large estimated loss; samples drawn independently leave none."""
    private, copied = _memorised(copies=3, noise=1e-3)
    rng = np.random.default_rng(1)
    independent = rng.random((900, 16))
    leaky, fresh = estimate(private, copied, removals=100), estimate(private, independent, removals=100)
    assert leaky["mean_privacy_loss"] > fresh["mean_privacy_loss"]
    assert leaky["expected_privacy_loss_bound"] > fresh["expected_privacy_loss_bound"]


def test_the_bound_is_chebyshevs_with_the_upper_semivariance():
    private, synthetic = _memorised(copies=2, noise=0.01)
    e = estimate(private, synthetic, removals=50, gamma=1e-4)
    assert e["neighbours_removed"] == NEIGHBOURS and e["removals"] == 50  # fixed: nothing on the card depends on the private set
    assert e["expected_privacy_loss_bound"] == pytest.approx(e["mean_privacy_loss"] + e["upper_semideviation"] / math.sqrt(1e-4))
    assert "not differential privacy" in e["kind"] and e["computed_on_private_data"] is True
    assert not any("epsilon" in k for k in e)


def test_one_nearest_neighbour_kl_matches_a_direct_computation():
    """The shortcut (only samples whose neighbour was removed change) against the estimator computed in full."""
    from sklearn.neighbors import NearestNeighbors

    from dpconvert.mechanisms.ex_post import _kl_without

    rng = np.random.default_rng(3)
    a = rng.random((200, 5))
    k = 3
    dist, idx = NearestNeighbors(n_neighbors=k + 2).fit(a).kneighbors(a)
    removed = np.array([7, 50, 120])
    fast = _kl_without(removed, dist[:, 1:], idx[:, 1:], dist[:, 1], len(a), a.shape[1], k)
    kept = np.setdiff1d(np.arange(len(a)), removed)
    total = 0.0
    for i in range(len(a)):
        others_a = np.delete(a, i, axis=0)
        others_b = a[kept[kept != i]]
        rho = np.linalg.norm(others_a - a[i], axis=1).min()
        nu = np.linalg.norm(others_b - a[i], axis=1).min()
        total += math.log(nu / rho)
    direct = a.shape[1] / len(a) * total + math.log((len(a) - k - 1) / (len(a) - 1))
    assert fast == pytest.approx(direct, rel=1e-9)


@pytest.mark.slow
def test_synth_publishes_it_only_on_request_and_the_audit_keeps_it_out_of_the_guarantee(tmp_path, cli):
    from dpconvert.accounting.statements import EX_POST_WARNING
    from dpconvert.auditing.card_checks import check_card
    from dpconvert.zoo_cards import PrivacyCard

    out = tmp_path / "synthetic.npz"
    code, stdout, err = cli("synth", "--private-data", "builtin:digits:train", "--out", out, "--input-size", "1,8,8", "--num-classes", "10",
                            "--eps", "4", "--gan-generator-steps", "10", "--samples", "500", "--ex-post")
    assert code == 0, err
    card = json.loads(out.with_name("synthetic.npz.card.json").read_text())
    e = card["empirical"]
    assert "not differential privacy" in e["kind"] and math.isfinite(e["expected_privacy_loss_bound"]) and e["removals"] == 200
    assert EX_POST_WARNING in card["warnings"] and "empirical, not DP" in stdout
    assert check_card(card)[1] == [] and cli("audit", out)[0] == 0
    for move in (lambda c: c["guarantee"].update(expected_privacy_loss=c.pop("empirical")),
                 lambda c: c["accounting"]["epsilons"].update(ex_post=c["empirical"]["expected_privacy_loss_bound"]),
                 lambda c: c["mechanism"].update(empirical=c.pop("empirical")),
                 lambda c: c["warnings"].remove(EX_POST_WARNING),
                 lambda c: c["empirical"].update(kind="expected privacy loss")):
        forged = json.loads(json.dumps(card))
        move(forged)
        schema_ok = True
        try:
            PrivacyCard(forged).validate("forged")
        except Exception:  # noqa: BLE001 - any schema refusal fails the audit
            schema_ok = False
        assert not schema_ok or check_card(forged)[1], forged.get("empirical")
    plain = tmp_path / "plain.npz"
    assert cli("synth", "--private-data", "builtin:digits:train", "--out", plain, "--input-size", "1,8,8", "--num-classes", "10",
               "--eps", "4", "--gan-generator-steps", "10", "--samples", "200")[0] == 0
    assert "empirical" not in json.loads(plain.with_name("plain.npz.card.json").read_text())


def test_nothing_in_the_estimate_but_its_value_depends_on_the_private_sets_size():
    """150 records and 1 100 records: the same removals, neighbours and sample counts (these once gave n away: the
    removals were min(200, n) and the neighbours ⌈samples / n⌉)."""
    rng = np.random.default_rng(1)
    synthetic = rng.random((500, 16))
    small, large = estimate(rng.random((150, 16)), synthetic), estimate(rng.random((1100, 16)), synthetic)
    numbers = {"expected_privacy_loss_bound", "mean_privacy_loss", "upper_semideviation"}
    assert {k: v for k, v in small.items() if k not in numbers} == {k: v for k, v in large.items() if k not in numbers}
    assert small["removals"] == 200
