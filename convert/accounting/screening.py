"""RDP of Private-kNN's noisy screening ("Private-kNN: Practical Differential Privacy for Computer Vision", Theorem 7), written by hand.

Screening releases one bit per query: [max_c n_c + N(0, σ1²) ≥ T_thr]. Under
add/remove of one private record, the max vote count t moves to t ± 1. With
p = P[N(t, σ1²) ≥ T], q = P[N(t', σ1²) ≥ T], the bit's Rényi divergence of
order α is log(p^α q^(1−α) + (1−p)^α (1−q)^(1−α)) / (α − 1). Theorem 7 takes
the max over every reachable t: ⌈k/c⌉ ≤ t ≤ k (the top class of k votes over
c classes has at least ⌈k/c⌉), and both neighbours t ± 1 in both directions.
We search 0 ≤ t ≤ k instead: a Poisson subsample can (rarely) keep fewer than
k records, and then the top count can fall below ⌈k/c⌉. The wider search can
only raise the bound (the maximum sits near t ≈ T anyway).
Everything is in log space (``scipy.stats.norm.logsf``), so large α and
extreme thresholds stay finite. The official code tried two values of t and
took the max of the wrong array; this searches the whole range.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 − e^x) for x ≤ 0, stable at both ends."""
    x = np.asarray(x, dtype=float)
    return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _bernoulli_renyi(logp: np.ndarray, logq: np.ndarray, alpha: float) -> np.ndarray:
    """D_α(Bern(p) ‖ Bern(q)) from log-probabilities."""
    log1p, log1q = _log1mexp(logp), _log1mexp(logq)
    t1 = alpha * logp - (alpha - 1.0) * logq
    t2 = alpha * log1p - (alpha - 1.0) * log1q
    return logsumexp(np.stack([t1, t2]), axis=0) / (alpha - 1.0)


def screening_rdp(alpha: float, *, k: int, num_classes: int, sigma1: float, threshold: float) -> float:
    """Theorem-7 RDP ε(α) of one (not subsampled) noisy screening."""
    if alpha <= 1:
        raise ValueError("RDP order must be > 1")
    if sigma1 <= 0:
        return math.inf
    t = np.arange(0, k + 1, dtype=float)
    logp = norm.logsf((threshold - t) / sigma1)
    best = -math.inf
    for shift in (-1.0, 1.0):
        logq = norm.logsf((threshold - (t + shift)) / sigma1)
        for a, b in ((logp, logq), (logq, logp)):
            if math.isinf(alpha):  # D_inf = max log-ratio over the two outcomes
                d = np.maximum(a - b, _log1mexp(a) - _log1mexp(b))
            else:
                d = _bernoulli_renyi(a, b, alpha)
            best = max(best, float(np.max(d)))
    return max(best, 0.0)


def gaussian_rdp(alpha: float, *, sensitivity: float, sigma: float) -> float:
    """RDP of the Gaussian mechanism: α Δ² / (2σ²) (Mironov 2017)."""
    return alpha * sensitivity**2 / (2.0 * sigma**2)
