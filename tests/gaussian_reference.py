"""Reference Gaussian-mechanism numbers written without dpconvert's code, shared by the accounting tests."""

from __future__ import annotations

import math

from scipy.stats import norm


def pld_one_gaussian(multiplier: float, delta: float) -> float:
    """dp-accounting's PLD of one Gaussian event with this noise multiplier, built here without dpconvert's code."""
    import dp_accounting

    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(float(multiplier)))
    return acc.get_epsilon(delta)


def gaussian_delta(eps: float, mu: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth & Su 2019, Cor. 2.13), for any real ε."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def exact_gaussian_epsilon(multiplier: float, delta: float) -> float:
    """ε of one Gaussian release of this multiplier at δ, exactly (μ = 1/multiplier in the μ-GDP δ(ε) above, solved in
    log space so that the huge ε of a tiny multiplier does not overflow): as dp-accounting's PLD gives, without its
    discretisation, in milliseconds where the PLD of a tiny multiplier takes minutes."""
    from scipy.optimize import brentq

    mu = 1.0 / multiplier

    def log_delta_gap(eps: float) -> float:
        a, b = norm.logcdf(-eps / mu + mu / 2), eps + norm.logcdf(-eps / mu - mu / 2)
        return a + math.log1p(-math.exp(b - a)) - math.log(delta)  # log δ(ε) − log δ (δ(ε) decreases in ε)

    hi = 1.0
    while log_delta_gap(hi) > 0:
        hi *= 2
    return brentq(log_delta_gap, 0.0, hi, xtol=1e-12, rtol=1e-12)
