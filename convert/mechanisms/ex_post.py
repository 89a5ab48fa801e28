"""The ex-post expected privacy-loss estimate of "Generating Artificial Data for Private Deep Learning" — NOT DP.

It reads the private records (hence this package) and is published only when the user asks (``synth``'s
``ex_post``), in the data card's ``empirical`` block, with a warning: it is a statistic of this one data set,
computed outside the DP accounting, and it is never an ε.

The paper's estimate, made concrete here:

1. Removing one private record r from the GAN's training set is simulated by deleting the ``k`` synthetic samples
   nearest to r (no retraining). ``k`` is fixed (default ``NEIGHBOURS``), never derived from the private set: the
   paper's ⌈n_synthetic / n_private⌉ would write a bound on the private set's size n on the published card.
2. The privacy loss of that removal is estimated as KL(A ‖ A∖N_k(r)) between the synthetic sample A and the
   sample without r's neighbours, by the 1-nearest-neighbour estimator of Wang, Kulkarni & Verdú (2009),
   D̂ = (d/n)·Σ_x log(ν(x)/ρ(x)) + log((n − k − 1)/(n − 1)), where ρ(x) is x's nearest-neighbour distance in A and
   ν(x) in A∖N_k(r) (x itself excluded from both). The KL divergence of the two output distributions is the
   expected privacy loss (the paper's §3).
3. Over ``removals`` records drawn at random with replacement (always that many, whatever n: the count on the card
   says nothing about n), Chebyshev's inequality with the upper semi-variance σ₊² bounds
   P(L ≥ E[L] + t) ≤ σ₊²/t²; the reported μ = mean + σ₊/√γ is exceeded with probability at most γ (the paper fixes
   γ = 10⁻⁵) — for this data set and this estimator, under the paper's assumptions (a GAN without mode collapse).
"""

from __future__ import annotations

import math
import numpy as np

EX_POST_KIND = ("ex-post expected privacy loss (\"Generating Artificial Data for Private Deep Learning\"): an estimate about "
                "this one data set, computed on the private records — not differential privacy, and not an ε")
NEIGHBOURS = 1  # synthetic samples deleted per simulated removal: a constant, so the card carries nothing that depends on n
REMOVALS = 200
ESTIMATOR = ("k synthetic samples nearest to a private record removed; KL(samples ‖ samples without them) by the 1-NN estimator "
             "of Wang, Kulkarni & Verdú (2009); Chebyshev's bound with the upper semi-variance")


def expected_privacy_loss(records, synthetic: np.ndarray, *, removals: int = REMOVALS, k: int = NEIGHBOURS, gamma: float = 1e-5,
                          seed: int = 0) -> dict:
    """The ``empirical`` block for ``synthetic`` (N×C×H×W pixels in [0, 1]) against the private ``records``
    (``PrivateRecords``, opened here at the data set's size, pixels in [0, 1])."""
    private = records.open_records().x.flatten(1).numpy().astype(np.float64)
    return estimate(private, synthetic.reshape(len(synthetic), -1).astype(np.float64), removals=removals, k=k, gamma=gamma, seed=seed)


def estimate(private: np.ndarray, synthetic: np.ndarray, *, removals: int = REMOVALS, k: int = NEIGHBOURS, gamma: float = 1e-5,
             seed: int = 0) -> dict:
    """The estimate from flat arrays (rows = records / samples); see the module docstring."""
    from sklearn.neighbors import NearestNeighbors

    n, d = synthetic.shape
    if n < k + 2:
        raise ValueError(f"{n} synthetic samples are too few to remove {k} and compare")
    # each sample's nearest neighbours in A (itself excluded): k + 1 of them, so one always survives a removal of k
    dist, idx = NearestNeighbors(n_neighbors=k + 2).fit(synthetic).kneighbors(synthetic)
    dist, idx = dist[:, 1:], idx[:, 1:]  # column 0 is the sample itself (distance 0)
    rho = np.maximum(dist[:, 0], 1e-12)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(private), size=removals, replace=True)
    near = NearestNeighbors(n_neighbors=k).fit(synthetic).kneighbors(private[chosen], return_distance=False)
    losses = np.array([_kl_without(removed, dist, idx, rho, n, d, k) for removed in near])
    mean = float(losses.mean())
    upper = float(np.sqrt(np.mean(np.maximum(losses - mean, 0.0) ** 2)))
    return {"kind": EX_POST_KIND, "computed_on_private_data": True, "expected_privacy_loss_bound": mean + upper / math.sqrt(gamma),
            "exceed_probability": gamma, "mean_privacy_loss": mean, "upper_semideviation": upper, "removals": int(len(chosen)),
            "neighbours_removed": int(k), "synthetic_samples": int(n), "estimator": ESTIMATOR}


def _kl_without(removed: np.ndarray, dist: np.ndarray, idx: np.ndarray, rho: np.ndarray, n: int, d: int, k: int) -> float:
    """D̂(A ‖ A∖removed): only samples whose nearest neighbour was removed change their ν (the first neighbour kept)."""
    gone = np.zeros(n, dtype=bool)
    gone[removed] = True
    affected = np.flatnonzero(gone[idx[:, 0]])
    log_ratio = 0.0
    for i in affected:
        keep = ~gone[idx[i]]
        nu = max(dist[i][keep][0], 1e-12)  # k + 1 neighbours, at most k removed: one is kept
        log_ratio += math.log(nu / rho[i])
    return d / n * log_ratio + math.log((n - k - 1) / (n - 1))
