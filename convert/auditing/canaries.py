"""Canary audit: an empirical ε lower bound from one training run (Steinke, Nasr, Jagielski 2023).

m canaries are made; each is inserted into the private set independently with
probability ½ (the inclusion bits stay in memory and are never written). After
training, the auditor scores every canary on the released student, guesses "in"
for the k₊ highest scores and "out" for the k₋ lowest, and abstains on the rest.
If the mechanism is (ε, δ)-DP under add/remove adjacency, the number of correct
guesses v out of r = k₊ + k₋ is stochastically dominated by Binomial(r, e^ε/(1+e^ε))
up to a δ term (their Theorem 5.2 / Proposition 5.7; the p-value below is their
Algorithm 2). The lower bound is the largest ε that the observed v rejects at
confidence 1 − β. It is evidence, never a guarantee: it must stay below the
card's ε, and a test checks that it does.

Canaries for Private-kNN are copies of public query images with a random label:
a kept canary sits at distance 0 from its query, so it is that query's nearest
neighbour and votes for its label — the strongest influence one record can have
on a query without seeing the private data. The score is the student's log
probability of the canary label on the canary image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Guess sizes tried, as fractions of m per side; β is split over them (Bonferroni),
# so trying several never inflates the bound.
GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.25)


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P[≥ v correct of r guesses] under the null "(ε, δ)-DP" (Steinke et al. 2023, Algorithm 2)."""
    from scipy import stats

    if not (0 <= v <= r <= m) or eps < 0 or not 0 <= delta <= 1:
        raise ValueError(f"invalid audit counts m={m} r={r} v={v} eps={eps} delta={delta}")
    q = 1.0 / (1.0 + math.exp(-eps))  # accuracy of ε-DP randomised response
    tail = float(stats.binom.sf(v - 1, r, q))
    # α = max_i P[v > Bin(r, q) ≥ v − i] / i pays for the δ slack of each of the 2m neighbours
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v−1], P[Bin = v−2], …
    alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1))) if v > 0 else 0.0
    return min(1.0, tail + alpha * delta * 2 * m)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float = 0.05) -> float:
    """Largest ε whose null hypothesis the observation rejects at level β (0 when none is rejected)."""
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return float("inf")
    for _ in range(60):  # bisection: p_value is increasing in ε
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


@dataclass
class CanaryAuditResult:
    canaries: int
    guesses: int  # half "in" (highest scores), half "out" (lowest)
    correct: int
    epsilon_lower_bound: float
    confidence: float
    delta: float

    def to_dict(self) -> dict:
        return {
            "kind": "one-run canary audit (Steinke, Nasr, Jagielski 2023) — empirical lower bound, not a guarantee",
            "canaries": self.canaries, "guesses": self.guesses, "correct": self.correct,
            "guess_in": self.guesses // 2, "guess_out": self.guesses // 2, "epsilon_lower_bound": self.epsilon_lower_bound,
            "confidence": self.confidence, "delta": self.delta,
            "guess_sizes_tried": [f"{f:g}·m per side" for f in GUESS_FRACTIONS],
            "score": "student log-probability of the canary label on the canary image",
        }


def audit_scores(scores: np.ndarray, included: np.ndarray, *, delta: float, beta: float = 0.05) -> CanaryAuditResult:
    """Best bound over the guess sizes in GUESS_FRACTIONS, each tested at β / len(GUESS_FRACTIONS)."""
    scores, included = np.asarray(scores, float), np.asarray(included, bool)
    m = len(scores)
    order = np.argsort(-scores, kind="stable")  # most member-like first
    best = None
    for f in GUESS_FRACTIONS:
        k = max(1, int(round(f * m)))
        if 2 * k > m:
            continue
        correct = int(included[order[:k]].sum() + (~included[order[m - k:]]).sum())
        eps = epsilon_lower_bound(m, 2 * k, correct, delta, beta / len(GUESS_FRACTIONS))
        if best is None or eps > best.epsilon_lower_bound:
            best = CanaryAuditResult(m, 2 * k, correct, eps, 1 - beta, delta)
    if best is None:
        raise ValueError(f"need at least 2 canaries, got {m}")
    return best


def make_canaries(public_x, candidates, m: int, num_classes: int, generator):
    """m canaries: copies of distinct query images (from ``candidates``) with uniformly random labels.

    ``generator`` draws which queries and labels; the inclusion bits come from
    ``inclusion_bits`` with a separate, unseeded source.
    """
    import torch

    if m > len(candidates):
        from dpconvert.errors import DpconvertError

        raise DpconvertError(f"`canaries` {m} is more than the {len(candidates)} queries", fix="lower `canaries`", param="canaries")
    pick = candidates[torch.randperm(len(candidates), generator=generator)[:m]]
    labels = torch.randint(0, num_classes, (m,), generator=generator)
    return public_x[pick].clone(), labels


def inclusion_bits(m: int):
    """Bernoulli(½) per canary from OS entropy: the bookkeeping is neither seeded nor written anywhere."""
    import secrets

    import torch

    return torch.tensor([secrets.randbits(1) == 1 for _ in range(m)], dtype=torch.bool)


def canary_scores(student, x, labels) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    student.eval()
    with torch.inference_mode():
        logp = torch.cat([F.log_softmax(student(c), 1) for c in x.split(1024)])
    return logp[torch.arange(len(labels)), labels].numpy()
