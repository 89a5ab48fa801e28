"""Private-kNN accounting (docs/privacy.md), add/remove one private record.

Per query: Poisson-subsampled noisy screening (always), then — on a fresh,
independent Poisson subsample — a Gaussian noisy argmax over the vote
histogram (L2 sensitivity √2), only for answered queries. Two valid bounds:

1. ``rdp``: Theorem-7 screening RDP (``screening.py``) amplified with the
   general Poisson-subsampling RDP bound (autodp, Zhu & Wang 2019,
   ``improved_bound_flag=False``: valid for any mechanism), plus the
   subsampled-Gaussian RDP of the argmax (dp_accounting), composed and
   converted with dp_accounting's RDP→(ε, δ) conversion.
2. ``pld``: screening treated as a Gaussian mechanism on the max count
   (sensitivity 1, σ1; the released bit is post-processing of it) plus the
   argmax Gaussian, both Poisson-subsampled, in dp_accounting's PLD accountant.

The reported ε is the minimum of the two; both are kept on the card.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from .screening import screening_rdp
from .adjacency import ADJACENCY_RECORD  # noqa: F401  (one definition, used by plans and cards)

# Integer orders: the general Poisson amplification bound is evaluated at integers.
RDP_ORDERS: tuple[int, ...] = tuple(range(2, 65)) + (72, 80, 96, 128, 160, 192, 256)


@dataclass(frozen=True)
class PknnParams:
    k: int
    sampling_rate: float  # γ: each private record is kept independently with this probability
    sigma1: float  # screening noise
    threshold: float  # T_thr
    sigma2: float  # argmax noise
    num_classes: int
    queries_asked: int
    queries_answered: int

    def validate(self) -> "PknnParams":
        from ..errors import DpconvertError

        if not 0 < self.sampling_rate <= 1:
            raise DpconvertError(fix="`sampling_rate` (γ) must be in (0, 1]", param="sampling_rate")
        if self.k < 1 or self.num_classes < 2:
            raise DpconvertError(fix="k must be >= 1 and there must be at least 2 classes")
        if self.sigma1 <= 0 or self.sigma2 <= 0:
            raise DpconvertError(fix="`sigma1` and `sigma2` must be > 0", param="sigma1")
        if self.queries_asked < 0 or not 0 <= self.queries_answered <= self.queries_asked:
            raise DpconvertError(fix="queries answered must be between 0 and the number of queries asked")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=64)
def subsampled_screening_rdp(k: int, num_classes: int, sigma1: float, threshold: float, gamma: float) -> tuple[float, ...]:
    """Per-query RDP of Poisson-subsampled screening at ``RDP_ORDERS`` (cached: calibration reuses it)."""
    from autodp.autodp_core import Mechanism
    from autodp.transformer_zoo import AmplificationBySampling

    @functools.lru_cache(maxsize=None)  # autodp evaluates the same orders many times
    def rdp(alpha):
        return screening_rdp(alpha, k=k, num_classes=num_classes, sigma1=sigma1, threshold=threshold)

    mech = Mechanism()
    mech.name, mech.params = "Theorem7NoisyScreen", {"k": k, "sigma1": sigma1, "threshold": threshold}
    mech.propagate_updates(rdp, "RDP")
    amplified = AmplificationBySampling(PoissonSampling=True)(mech, gamma, improved_bound_flag=False)
    return tuple(float(amplified.RenyiDP(a)) for a in RDP_ORDERS)


def subsampled_argmax_rdp(sigma2: float, gamma: float) -> np.ndarray:
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian

    # histogram L2 sensitivity √2 with noise std σ2 → multiplier σ2/√2
    return np.asarray(_compute_rdp_poisson_subsampled_gaussian(float(gamma), float(sigma2) / math.sqrt(2.0), RDP_ORDERS), dtype=float)


def epsilon_rdp(plan: PknnParams, delta: float) -> float:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    scr = np.asarray(subsampled_screening_rdp(plan.k, plan.num_classes, float(plan.sigma1), float(plan.threshold), float(plan.sampling_rate)))
    total = plan.queries_asked * scr + plan.queries_answered * subsampled_argmax_rdp(plan.sigma2, plan.sampling_rate)
    eps, _ = compute_epsilon(RDP_ORDERS, total, float(delta))
    return float(eps)


def epsilon_pld(plan: PknnParams, delta: float) -> float:
    """Screening as a Gaussian on the max count (sensitivity 1, σ1), the argmax as a Gaussian on the histogram
    (sensitivity √2, σ2), both Poisson-subsampled, composed in dp_accounting's PLD accountant."""
    from . import composition

    return composition.epsilon(pld_terms(plan.sigma1, plan.sigma2, plan.sampling_rate, plan.queries_asked, plan.queries_answered),
                               delta, accountant="pld", discretization=PLD_DISCRETIZATION)


PLD_DISCRETIZATION = 1e-3


def pld_terms(sigma1: float, sigma2: float, rate: float, screened: int, answered: int):
    return [(sigma1, screened, rate), (sigma2 / math.sqrt(2.0), answered, rate)]


def epsilons(plan: PknnParams, delta: float, *, with_pld: bool = True) -> dict[str, float]:
    out = {"rdp_theorem7_autodp": epsilon_rdp(plan, delta)}
    if with_pld:
        out["pld_gaussian_screening"] = epsilon_pld(plan, delta)
    out["epsilon"] = min(out.values())
    return out
