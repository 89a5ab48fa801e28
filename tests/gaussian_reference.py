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
