"""DP-SGD accounting: Poisson-subsampled Gaussian steps, plus the Gaussian count that scales the learning rate.

Under add/remove of one record, a step's sum of per-example gradients clipped to norm C moves by at most C; the
optimizer adds N(0, σ²C²) to it, so each step is a Gaussian mechanism with multiplier σ, run on a Poisson subsample
with rate q. The learning rate divides the noisy sum by an expected lot size q·ñ, where ñ = n + N(0, σ_n²) is a
noisy count (sensitivity 1): the private-set size n itself never enters the model or the card. Both compose, in
dp_accounting's PLD accountant (the reported bound) and its RDP accountant (a looser, independent bound).
"""

from __future__ import annotations

from . import composition

PLD_DISCRETIZATION = composition.PLD_DISCRETIZATION
SEARCH_DISCRETIZATION = 1e-3  # coarse PLD during the σ search; the answer is then checked at the fine one


def terms(*, sigma: float, sampling_rate: float, steps: int, count_sigma: float | None) -> list[composition.Term]:
    """The composition's terms; ``count_sigma`` None for a run without the noisy count (the DP-GAN critic: Adam)."""
    return ([(count_sigma, 1, None)] if count_sigma is not None else []) + [(sigma, steps, sampling_rate)]


def epsilons(term_list: list[composition.Term], delta: float, *, discretization: float = PLD_DISCRETIZATION) -> dict[str, float]:
    out = {"pld": composition.epsilon(term_list, delta, accountant="pld", discretization=discretization),
           "rdp": composition.epsilon(term_list, delta, accountant="rdp")}
    out["epsilon"] = min(out.values())
    return out
