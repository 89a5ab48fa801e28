"""Per-answer accounting of DPDFD (docs/privacy.md, "Many rounds for the ε of one release"), proven before it is used.

The accountant against independent single-Gaussian computations; the exact δ(ε) of small adaptive mechanisms computed
by integration (a second query chosen from the first noisy answer), against the per-answer bound; the engine's
distinctness over the whole run; and that the teacher is reached only through the release.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.stats import norm

from dpconvert.accounting import DpdfdAccountant, PerAnswerDpdfdAccountant

from tests.gaussian_reference import gaussian_delta as _gaussian_delta
from tests.gaussian_reference import pld_one_gaussian as _pld_one_gaussian
from tests.engine import run_rounds

DELTA = 1e-5


def _accountant(cls, sigma: float, releases: int, batch: int = 1000, **kw):
    a = cls(**kw)
    for _ in range(releases):
        a.record("normalised_gaussian_release", sigma=sigma, clip=1.0, batch_size=batch)
    return a




@pytest.mark.parametrize("sigma", [2.0, 3.73, 10.0])
@pytest.mark.parametrize("releases", [1, 3, 50])
def test_per_answer_epsilon_is_one_gaussian_whatever_the_releases(sigma, releases):
    a = _accountant(PerAnswerDpdfdAccountant, sigma, releases)
    eps = a.epsilon(delta=DELTA)
    assert eps == pytest.approx(_pld_one_gaussian(sigma, DELTA), rel=2e-3)
    assert _gaussian_delta(eps, 1 / sigma) <= DELTA * (1 + 1e-6)  # a true bound at the reported ε …
    assert _gaussian_delta(eps * 0.999, 1 / sigma) > DELTA  # … and a tight one
    composed = _accountant(DpdfdAccountant, sigma, releases)
    assert eps <= composed.epsilon(delta=DELTA) * (1 + 1e-12)
    assert a.record_level_epsilon(delta=DELTA) == composed.record_level_epsilon(delta=DELTA)  # the worst case is unchanged
    assert a.replace_one_epsilon(delta=DELTA) == pytest.approx(_pld_one_gaussian(sigma / 2, DELTA), rel=2e-3)


def test_an_input_answered_m_times_costs_sqrt_m():
    for m in (2, 5):
        a = _accountant(PerAnswerDpdfdAccountant, 4.0, 7, max_answers=m)
        assert a.epsilon(delta=DELTA) == pytest.approx(_pld_one_gaussian(4.0 / math.sqrt(m), DELTA), rel=2e-3)
        state = a.state_dict()
        assert state["max_answers_per_input"] == m
        assert PerAnswerDpdfdAccountant().load_state_dict(state).epsilon(delta=DELTA) == a.epsilon(delta=DELTA)


def test_the_smallest_sigma_of_any_round_counts():
    a = PerAnswerDpdfdAccountant()
    a.record("normalised_gaussian_release", sigma=6.0, clip=1.0, batch_size=10)
    a.record("normalised_gaussian_release", sigma=3.0, clip=1.0, batch_size=10)
    assert a.epsilon(delta=DELTA) == pytest.approx(_pld_one_gaussian(3.0, DELTA), rel=2e-3)


# ------------------------------------------------------------------ exact δ(ε) of small adaptive mechanisms
def _exact_delta(eps: float, sigma: float, second_round, tau: float = 0.3) -> float:
    """δ(ε) = E_T[max(0, 1 − e^{ε − L})] of a two-round transcript, computed exactly (one integral, closed-form inner).

    Round 1 asks x*, the input on which the neighbouring teachers differ (answers 1 and 0, sensitivity 1, noise σ).
    Round 2's query is chosen from the first noisy answer y1: ``second_round(y1 > tau)`` is True when it asks x*
    again, False when it asks an input both teachers answer alike (no loss)."""
    def loss(y, shift=0.0):  # log N(y; 1, σ²) / N(y; 0, σ²)
        return (y - 0.5) / sigma**2

    def integrand(y1):
        p1 = norm.pdf(y1, 1.0, sigma)
        if second_round(y1 > tau):  # x* asked again: the second Gaussian's hockey-stick at the remaining budget
            return p1 * _gaussian_delta(eps - loss(y1), 1 / sigma)
        return max(0.0, p1 - math.exp(eps) * norm.pdf(y1, 0.0, sigma))

    lo, hi = -12 * sigma, 1 + 12 * sigma
    return sum(integrate.quad(integrand, a, b, limit=400, epsabs=1e-14)[0] for a, b in ((lo, tau), (tau, hi)))


@pytest.mark.parametrize("sigma", [1.0, 3.0])
def test_the_bound_holds_on_an_adaptive_transcript_and_is_tight(sigma):
    eps_grid = [0.1, 0.5, 1.0, 2.0]
    for eps in eps_grid:
        one = _gaussian_delta(eps, 1 / sigma)  # the per-answer bound with m = 1
        # x* asked in round 1 only; round 2 chosen from its noisy answer asks another input: the bound is exact
        assert _exact_delta(eps, sigma, lambda up: False) == pytest.approx(one, rel=1e-6, abs=1e-12)
        # an adaptive repeat (x* asked again when y1 > τ): m = 2 must be charged; m = 1 would understate δ
        repeat = _exact_delta(eps, sigma, lambda up: up)
        assert one < repeat <= _gaussian_delta(eps, math.sqrt(2) / sigma) * (1 + 1e-6)


def test_a_differing_input_asked_only_sometimes_costs_at_most_one_release():
    """Round 1 asks an input both teachers answer alike; round 2 asks x* only when y1 > τ: δ = P(y1 > τ)·δ_G ≤ δ_G."""
    sigma, tau = 2.0, 0.3
    for eps in (0.2, 1.0):
        p_asked = 1 - norm.cdf(tau, 0.0, sigma)
        assert p_asked * _gaussian_delta(eps, 1 / sigma) <= _gaussian_delta(eps, 1 / sigma)


# ------------------------------------------------------------------ the engine: distinct over the run, teacher only through the release
def _engine(teacher, releases=3, batch=600, generator=True, seed=0):
    from dpconvert.io.spec import InputSpec
    from tests.engine import engine_config
    from dpconvert.mechanisms.dpdfd import Dpdfd
    from dpconvert.mechanisms.noise import noise_stream
    from dpconvert.generators import create_generator
    from dpconvert.students import create_student

    spec = InputSpec(1, 8, 8, 10, (0.305,), (0.376,))
    torch.manual_seed(seed)
    cfg = engine_config(releases=releases, batch_size=batch, sigma=3.0, student_epochs=1, minibatch=256, generator_steps=5, gen_batch=64,
                      prior_pool=3, seed=seed, logit_adjust=True, prior_fraction=0.5 if generator else 1.0)
    acc = PerAnswerDpdfdAccountant()
    job = Dpdfd(teacher, create_student("datalens_cnn", spec), create_generator("dafl_small", spec) if generator else None, cfg, acc,
                prior=create_generator("random_fields", spec), noise=noise_stream(seed, seeded=True))
    return job, acc


def _digits_teacher():
    from dpconvert.io.teachers import load_teacher

    return load_teacher("builtin:digits")


@pytest.mark.parametrize("generator", [False, True])
def test_no_input_is_answered_twice_over_the_run(generator):
    job, acc = _engine(_digits_teacher(), generator=generator)
    done = run_rounds(job)
    inputs = torch.cat([done.released_inputs(r) for r in range(3)]).reshape(1800, -1)
    assert len(torch.unique(inputs, dim=0)) == 1800 and len(job.answered.hashes) == 1800
    assert acc.count("normalised_gaussian_release") == 3 and acc.max_answers == 1


def test_a_source_that_repeats_itself_is_redrawn_across_releases(monkeypatch):
    """A query source with few distinct inputs: every release draws fresh ones, and the run stops with an error
    before it would answer one twice."""
    from dpconvert.errors import DpconvertError

    job, _ = _engine(_digits_teacher(), releases=3, batch=50, generator=False)
    pool = job.prior(torch.randn(120, job.prior.nz, generator=torch.Generator().manual_seed(1)))
    counter = {"i": 0}

    def few(n, pool_factor=1):  # cycles through 120 fixed inputs
        idx = (torch.arange(n) + counter["i"]) % len(pool)
        counter["i"] += n
        return pool[idx], torch.full((n, 2), -1, dtype=torch.long)

    monkeypatch.setattr(job.queries, "with_sources", few)
    monkeypatch.setattr(job, "store_z", False)
    job.release(1), job.release(2)  # 100 of the 120 distinct inputs
    with pytest.raises(DpconvertError, match="not answered before"):
        job.release(3)  # only 20 fresh ones remain for a release of 50


class _GuardedTeacher:
    """A teacher that raises unless the mechanism's release is asking."""

    def __init__(self, inner) -> None:
        self.inner, self.open, self.calls = inner, False, 0

    def __call__(self, x):
        if not self.open:
            raise AssertionError("the teacher was reached outside the noisy release")
        self.calls += 1
        return self.inner(x)


def test_the_teacher_is_reached_only_through_the_release(monkeypatch):
    from dpconvert.mechanisms import dpdfd as engine

    guarded = _GuardedTeacher(_digits_teacher())
    real = engine.Dpdfd._noisy_rows

    def noisy_rows(self, rows):
        guarded.open = True
        try:
            return real(self, rows)
        finally:
            guarded.open = False

    monkeypatch.setattr(engine.Dpdfd, "_noisy_rows", noisy_rows)
    job, _ = _engine(guarded, generator=True)
    run_rounds(job)  # student training, generator steps between rounds, balanced selection, logit adjustment: no teacher
    job.synthesise(64)
    assert guarded.calls > 0


def test_a_neighbouring_teacher_moves_exactly_one_pre_noise_row_of_the_run(monkeypatch):
    """Replay one run's transcript (each round's queries chosen from the same earlier releases): a teacher that answers
    one queried input differently changes exactly one row of everything released before noise."""
    from dpconvert.mechanisms import dpdfd as engine

    captured = []  # (student logits, teacher logits) of every chunk, in release order
    real = engine.per_sample_output_gradient

    def spy(s, t, cfg):
        captured.append((s.clone(), t.clone(), cfg))
        return real(s, t, cfg)

    monkeypatch.setattr(engine, "per_sample_output_gradient", spy)
    job, _ = _engine(_digits_teacher(), generator=True)
    run_rounds(job)
    rows = [real(s, t, cfg) for s, t, cfg in captured]
    total = sum(len(r) for r in rows)
    assert total == 1800
    for target in (5, 777, 1799):  # an answer of release 1, 2 and 3
        changed = []
        at = 0
        for (s, t, cfg), g in zip(captured, rows):
            t2 = t.clone()
            if at <= target < at + len(t):
                t2[target - at] = -t2[target - at] + 3.0  # the neighbour's answer to that one input
            changed.append((real(s, t2, cfg) != g).any(1).sum().item())
            at += len(t)
        assert sum(changed) == 1


def test_per_answer_card_passes_the_audit_and_its_conditions_are_checked(tmp_path, cli):
    import json

    from dpconvert.auditing.card_checks import check_card

    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--eps", "1", "--steps", "3", "--batch-size", "1500", "--epochs", "1", "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    assert card["accounting"]["accountant"] == "dpdfd_per_answer" and card["mechanism"]["releases"] == 3
    assert card["guarantee"]["epsilon"] == pytest.approx(1.0, abs=1e-6)  # three releases, the ε of one
    assert card["mechanism"]["sigma"] == pytest.approx(_accountant_sigma(1.0), rel=1e-3)
    assert cli("audit", out)[0] == 0
    for edit, field in ((lambda c: c["mechanism"].pop("distinct_across_releases"), "mechanism.distinct_across_releases"),
                        (lambda c: c["mechanism"].update(max_answers_per_input=3), "mechanism.max_answers_per_input"),
                        (lambda c: c["mechanism"].update(releases=1), "mechanism.releases")):
        forged = json.loads(json.dumps(card))
        edit(forged)
        assert any(w == field for w, _ in check_card(forged)[1]), field


def _accountant_sigma(eps: float) -> float:
    from dpconvert.accounting import calibrate

    return calibrate.dpdfd_sigma(eps=eps, delta=1e-5, steps=1)


def test_plan_plans_the_per_answer_run(cli):
    import json

    code, out, _ = cli("plan", "--method", "dpdfd", "--eps", "1", "--steps", "10", "--batch-size", "1000", "--json")
    assert code == 0
    plan = json.loads(out)
    assert plan["sigma"] == pytest.approx(_accountant_sigma(1.0), rel=1e-3) and plan["accountant"] == "dpdfd_per_answer"
    assert np.isclose(plan["epsilon"], 1.0, atol=1e-6)
