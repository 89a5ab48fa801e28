"""Calibration: the noise (or the number of steps) that meets a target ε.

Every answer is on the safe side: the returned σ gives ε(σ) ≤ target (checked
before returning) and is within ``rel_tol`` of the smallest such σ.
"""

from __future__ import annotations

import math
from typing import Callable

from ..errors import DpconvertError
from . import dpdfd, dpsgd, gaussian, pknn


def smallest_sigma(eps_of_sigma: Callable[[float], float], target: float, *, rel_tol: float = 1e-4, hi: float = 1.0) -> float:
    """Smallest σ (to ``rel_tol``) with ε(σ) ≤ target, for ε decreasing in σ."""
    if not target > 0:
        raise DpconvertError(fix=f"target ε must be > 0, got {target}")
    lo = 0.0
    while eps_of_sigma(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e9:
            raise DpconvertError(f"no noise level reaches ε={target}", fix="raise `eps` or lower the number of releases", param="eps")
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if eps_of_sigma(mid) > target:
            lo = mid
        else:
            hi = mid
    assert eps_of_sigma(hi) <= target  # invariant of the bisection, not user input
    return hi


def dpdfd_sigma(*, eps: float, delta: float, steps: int, batch_size: int = 1, scope: str = "query", teachers: int = 1) -> float:
    """σ for T DPDFD steps at (ε, δ) under ``scope``: σ = s*·√T·(sensitivity in units of C) with s* the one-shot
    multiplier (query: 1; record_disjoint: 2√B/n for n teachers on disjoint partitions)."""
    _check(eps, delta, steps)
    s_star = smallest_sigma(lambda s: gaussian.epsilon(delta, s), eps, rel_tol=1e-6)
    sigma = s_star * math.sqrt(steps) * dpdfd.sensitivity_factor(scope, batch_size, teachers)
    while dpdfd.epsilon(sigma=sigma, steps=steps, delta=delta, batch_size=batch_size, scope=scope, teachers=teachers) > eps:  # rounding safety
        sigma *= 1 + 1e-9
    return sigma


def dpdfd_max_steps(*, eps: float, delta: float, sigma: float) -> int:
    """Largest T with ε(σ, T) ≤ target."""
    _check(eps, delta, 1)
    s_star = smallest_sigma(lambda s: gaussian.epsilon(delta, s), eps, rel_tol=1e-9)
    t = int(math.floor((sigma / s_star) ** 2))
    while t > 0 and dpdfd.epsilon(sigma=sigma, steps=t, delta=delta) > eps:
        t -= 1
    return t


def pknn_sigma2(plan: pknn.PknnParams, *, eps: float, delta: float) -> float:
    """σ2 (argmax noise) for a Private-kNN query plan: the smallest whose *reported* ε meets the target.

    The reported ε is the minimum over the valid bounds (Theorem-7 RDP and the
    Gaussian-screening PLD), so σ2 is calibrated on that minimum; both bounds
    only fall when fewer queries are answered than planned.
    """
    from dataclasses import replace

    _check(eps, delta, 1)
    floor = pknn.epsilons(replace(plan, queries_answered=0), delta)["epsilon"]
    if floor >= eps:
        raise DpconvertError(
            f"screening alone already costs ε={floor:.3f} ≥ {eps}", fix="raise `sigma1`, lower `sampling_rate` or ask fewer queries", param="sigma1"
        )
    return smallest_sigma(lambda s2: pknn.epsilons(replace(plan, sigma2=s2), delta)["epsilon"], eps, rel_tol=1e-3)


def dpsgd_sigma(*, eps: float, delta: float, sampling_rate: float, steps: int, count_sigma: float | None) -> float:
    """σ for DP-SGD (``accounting/dpsgd.py``): searched on a coarse PLD grid, then raised until the reported bound at
    the card's discretisation meets the target."""
    _check(eps, delta, steps)

    def eps_of(sigma: float, discretization: float) -> float:
        t = dpsgd.terms(sigma=sigma, sampling_rate=sampling_rate, steps=steps, count_sigma=count_sigma)
        return dpsgd.epsilons(t, delta, discretization=discretization)["epsilon"]

    floor = eps_of(1e6, dpsgd.PLD_DISCRETIZATION)
    if floor >= eps:
        raise DpconvertError(f"the noisy record count alone costs ε={floor:.3f} ≥ {eps}", fix="raise `count_sigma` or `eps`", param="count_sigma")
    sigma = smallest_sigma(lambda s: eps_of(s, dpsgd.SEARCH_DISCRETIZATION), eps, rel_tol=1e-3)
    while eps_of(sigma, dpsgd.PLD_DISCRETIZATION) > eps:  # the fine grid may be a hair above the coarse one
        sigma *= 1.002
    return sigma


def _check(eps: float, delta: float, steps: int) -> None:
    if not eps > 0:
        raise DpconvertError(fix=f"`eps` must be > 0, got {eps}", param="eps")
    if not 0 < delta < 1:
        raise DpconvertError(fix=f"`delta` must be in (0, 1), got {delta}", param="delta")
    if steps < 1:
        raise DpconvertError(fix=f"`releases` must be >= 1, got {steps}", param="releases")
