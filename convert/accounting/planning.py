"""Privacy plans: what noise a run needs and what ε each accountant gives.

Used by ``dpconvert plan`` and printed before every conversion.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Optional

from dpconvert.accounting import calibrate, dpdfd, dpsgd, pknn
from dpconvert.accounting.plans import DpdfdPlan, DpsgdPlan, PknnPlan
from dpconvert.errors import DpconvertError

log = logging.getLogger("dpconvert")


def check_delta(delta: float, n: Optional[int]) -> None:
    if not 0 < delta < 1:
        raise DpconvertError(fix=f"`delta` must be in (0, 1), got {delta}", param="delta")
    if n is not None:
        if n < 1:
            raise DpconvertError(fix=f"`n` (private set size) must be >= 1, got {n}", param="n")
        if delta > 1.0 / n:
            raise DpconvertError(f"`delta` {delta:g} is larger than 1/n = {1.0 / n:.3g}", fix=f"use `delta` {10 ** -len(str(n)):g} or smaller", param="delta")


def plan_dpdfd(*, eps: Optional[float], delta: float, steps: int, batch_size: int, noise_multiplier: Optional[float] = None,
               n: Optional[int] = None, cross_check: bool = True, per_answer: bool = False, disjoint_teachers: int = 0) -> DpdfdPlan:
    """σ for (ε, δ, T) — or ε for a given σ — with every accountant's ε and the record-level worst case.

    ``per_answer``: every input is answered once over the run (checked by the engine), so the query-level ε is one
    release's whatever T is (``PerAnswerDpdfdAccountant``); otherwise the T releases compose. The record-level worst
    case composes over all T releases either way.

    ``disjoint_teachers`` n ≥ 2: n teachers trained on disjoint partitions of the private data, each row the mean of their
    normalised rows: ``eps`` is then record-level (sensitivity 2C·√(B·T)/n, ``DisjointTeachersDpdfdAccountant``) and σ is
    calibrated to it; the per-answer query-level ε is reported beside it."""
    if disjoint_teachers:
        return _plan_disjoint(eps=eps, delta=delta, steps=steps, batch_size=batch_size, noise_multiplier=noise_multiplier,
                              teachers=disjoint_teachers, cross_check=cross_check)
    check_delta(delta, n)
    if steps < 1:
        raise DpconvertError(fix=f"`releases` must be >= 1, got {steps}", param="releases")
    if batch_size < 1:
        raise DpconvertError(fix=f"`batch_size` must be >= 1, got {batch_size}", param="batch_size")
    if noise_multiplier is None:
        if eps is None:
            raise DpconvertError(fix="give `eps` (to calibrate σ) or `noise_multiplier` (to compute ε)", param="eps")
        sigma, calibrated = calibrate.dpdfd_sigma(eps=eps, delta=delta, steps=1 if per_answer else steps), True
    else:
        if noise_multiplier < 0:
            raise DpconvertError(fix="`noise_multiplier` must be >= 0", param="noise_multiplier")
        sigma, calibrated = float(noise_multiplier), False
    kw = dict(sigma=sigma, steps=1 if per_answer else steps, delta=delta)  # the query-level bounds
    plan = DpdfdPlan(accountant="dpdfd_per_answer" if per_answer else "dpdfd", sigma=sigma, steps=steps, batch_size=batch_size,
                     delta=delta, target_epsilon=eps, calibrated=calibrated, epsilon=dpdfd.epsilon(**kw),
                     accountants={"analytic_gaussian": dpdfd.epsilon(**kw)}, replace_one_epsilon=dpdfd.epsilon(**kw, scope="query_replace"),
                     record_level_epsilon=dpdfd.epsilon(sigma=sigma, steps=steps, delta=delta, batch_size=batch_size, scope="record"),
                     scope="query", adjacency=dpdfd.ADJACENCY_QUERY)
    if cross_check and sigma > 0:
        plan.accountants.update(pld=dpdfd.epsilon_pld(**kw), rdp=dpdfd.epsilon_rdp(**kw))
    return plan


def _plan_disjoint(*, eps, delta, steps, batch_size, noise_multiplier, teachers, cross_check) -> DpdfdPlan:
    check_delta(delta, None)
    if teachers < 2:
        raise DpconvertError(fix=f"`disjoint_partitions` needs two teachers or more (one per partition), got {teachers}", param="disjoint_partitions")
    record = dict(steps=steps, delta=delta, batch_size=batch_size, scope="record_disjoint", teachers=teachers)
    base = plan_dpdfd(eps=None, delta=delta, steps=steps, batch_size=batch_size, per_answer=True, cross_check=False,
                      noise_multiplier=noise_multiplier if noise_multiplier is not None
                      else calibrate.dpdfd_sigma(eps=_require_eps(eps), **record))
    sigma = base.sigma
    eps_record = dpdfd.epsilon(sigma=sigma, **record)
    plan = replace(base, accountant="dpdfd_disjoint_teachers", target_epsilon=eps, calibrated=noise_multiplier is None, epsilon=eps_record,
                   accountants={"analytic_gaussian": eps_record}, query_level_epsilon=base.epsilon, record_level_epsilon=eps_record,
                   teachers=teachers, scope="record", adjacency=dpdfd.ADJACENCY_RECORD_DISJOINT)
    if cross_check and sigma > 0:
        plan.accountants.update(pld=dpdfd.epsilon_pld(sigma=sigma, **record), rdp=dpdfd.epsilon_rdp(sigma=sigma, **record))
    return plan


def _require_eps(eps):
    if eps is None:
        raise DpconvertError(fix="give `eps` (to calibrate σ) or `noise_multiplier` (to compute ε)", param="eps")
    return eps


def plan_pknn(*, eps: Optional[float], delta: float, k: int, sampling_rate: float, sigma1: float, threshold: float,
              sigma2: Optional[float], num_classes: int, queries: int, answered: int, n: Optional[int] = None) -> PknnPlan:
    check_delta(delta, n)
    if queries < 1:
        raise DpconvertError(fix=f"`queries` must be >= 1, got {queries}", param="queries")
    if n is not None and k > sampling_rate * n / 2:
        raise DpconvertError(f"k={k} is larger than half the expected subsample size γ·n/2 = {sampling_rate * n / 2:.0f}", fix="lower `k` or raise `sampling_rate`", param="k")
    base = pknn.PknnParams(k, sampling_rate, sigma1, threshold, sigma2 or 1.0, num_classes, queries, answered).validate()
    calibrated = sigma2 is None
    if calibrated:
        if eps is None:
            raise DpconvertError(fix="give `eps` (to calibrate σ2) or `sigma2` (to compute ε)", param="eps")
        base = replace(base, sigma2=calibrate.pknn_sigma2(base, eps=eps, delta=delta))
    eps_all = pknn.epsilons(base, delta)
    return PknnPlan(**base.to_dict(), delta=delta, target_epsilon=eps, calibrated=calibrated, epsilon=eps_all["epsilon"],
                    accountants={k_: v for k_, v in eps_all.items() if k_ != "epsilon"}, scope="record", adjacency=pknn.ADJACENCY_RECORD)


def plan_dpsgd(*, eps: Optional[float], delta: float, sampling_rate: float, steps: int, clip: float, sigma: Optional[float],
               count_sigma: float) -> DpsgdPlan:
    """σ for DP-SGD's (q, T) — or ε for a given σ — by PLD (reported) and RDP."""
    check_delta(delta, None)
    calibrated = sigma is None
    if calibrated:
        if eps is None:
            raise DpconvertError(fix="give `eps` (to calibrate σ) or `sigma` (to compute ε)", param="eps")
        sigma = calibrate.dpsgd_sigma(eps=eps, delta=delta, sampling_rate=sampling_rate, steps=steps, count_sigma=count_sigma)
    eps_all = dpsgd.epsilons(dpsgd.terms(sigma=sigma, sampling_rate=sampling_rate, steps=steps, count_sigma=count_sigma), delta)
    return DpsgdPlan(sigma=sigma, clip=clip, sampling_rate=sampling_rate, steps=steps, count_sigma=count_sigma, delta=delta, target_epsilon=eps,
                     calibrated=calibrated, epsilon=eps_all["epsilon"], accountants={k: v for k, v in eps_all.items() if k != "epsilon"},
                     scope="record", adjacency=pknn.ADJACENCY_RECORD)
