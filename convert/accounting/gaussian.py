"""Exact (ε, δ) of the Gaussian mechanism (pure maths, no torch).

Analytic Gaussian mechanism, Balle & Wang 2018, Thm. 8: a Gaussian mechanism
with L2 sensitivity Δ and noise std s·Δ is (ε, δ)-DP iff
    δ ≥ Φ(−ε·s + 1/(2s)) − e^ε · Φ(−ε·s − 1/(2s)).
T-fold composition of Gaussians with multipliers s_i is a Gaussian with
1/s² = Σ 1/s_i² (Dong, Roth & Su 2019, Gaussian DP), so this is exact for any
number of noisy releases. Everything is computed in log space (log Φ via
``scipy.special.log_ndtr``) so it stays stable for very small and large s.
"""

from __future__ import annotations

import math

from scipy.special import log_ndtr


def composed_multiplier(multipliers_and_counts) -> float:
    """Noise multiplier of the single Gaussian equal to the composition.

    ``multipliers_and_counts``: iterable of (s_i, n_i): n_i releases with
    noise std s_i × sensitivity. Returns inf when nothing was released.
    """
    mu2 = 0.0
    for s, n in multipliers_and_counts:
        if n <= 0:
            continue
        if s <= 0:
            return 0.0
        mu2 += n / (s * s)
    return math.inf if mu2 == 0 else 1.0 / math.sqrt(mu2)


def log_delta(eps: float, s: float) -> float:
    """log δ(ε) of the Gaussian mechanism with noise multiplier s."""
    if s == math.inf:
        return -math.inf
    if s <= 0:
        return 0.0
    a = -eps * s + 1.0 / (2.0 * s)
    b = -eps * s - 1.0 / (2.0 * s)
    la, lb = float(log_ndtr(a)), float(log_ndtr(b))
    r = eps + lb - la  # log(e^ε Φ(b) / Φ(a)) < 0 always
    if r >= 0:
        return -math.inf
    return la + math.log(-math.expm1(r))


def delta(eps: float, s: float) -> float:
    return math.exp(log_delta(eps, s))


def epsilon(delta_target: float, s: float) -> float:
    """Smallest ε with δ(ε) ≤ δ_target (bisection on the monotone δ(ε) in log space)."""
    if not 0 < delta_target < 1:
        raise ValueError("delta must be in (0, 1)")
    if s == math.inf:
        return 0.0
    if s <= 0:
        return math.inf
    target = math.log(delta_target)
    if log_delta(0.0, s) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while log_delta(hi, s) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e8:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if log_delta(mid, s) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return hi  # δ(hi) ≤ target: an upper bound, never below the true ε
