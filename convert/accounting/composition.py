"""The one place dpconvert composes events in dp_accounting's PLD and RDP accountants.

Each term is ``(noise multiplier, count, sampling rate)``: ``count`` Gaussian mechanisms with that multiplier
(noise std / L2 sensitivity), Poisson-subsampled at ``sampling rate`` unless it is None. Numbers are passed as
floats: dp_accounting mishandles an int noise multiplier inside composed events.
"""

from __future__ import annotations

from typing import Iterable, Optional

Term = tuple[float, int, Optional[float]]

PLD_DISCRETIZATION = 1e-4
# Below this noise multiplier a PLD grid at the finest discretization grows as 1/σ² (σ = 0.02 is out of memory): the
# interval grows with it, so the grid stays the size it has at this σ. A coarser interval only loosens the bound
# (dp_accounting discretises pessimistically), and any card is replayed in bounded time and memory.
PLD_FINEST_AT = 0.5


def _event(terms: Iterable[Term]):
    import dp_accounting

    events = []
    for multiplier, count, rate in terms:
        if count <= 0:
            continue
        inner = dp_accounting.GaussianDpEvent(float(multiplier))
        if rate is not None:
            inner = dp_accounting.PoissonSampledDpEvent(float(rate), inner)
        events.append(dp_accounting.SelfComposedDpEvent(inner, int(count)))
    return dp_accounting.ComposedDpEvent(events) if events else None


def epsilon(terms: Iterable[Term], delta: float, *, accountant: str = "pld", discretization: float = PLD_DISCRETIZATION) -> float:
    """ε at ``delta`` of the composition, by dp_accounting's ``pld`` or ``rdp`` accountant (0 when nothing was released)."""
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    terms = list(terms)
    event = _event(terms)
    if event is None:
        return 0.0
    if accountant == "pld":
        smallest = min((float(m) for m, count, _ in terms if count > 0), default=PLD_FINEST_AT)
        if smallest <= 0:
            raise ValueError(f"noise multiplier {smallest:g}: no finite ε")
        coarsened = discretization * max(1.0, (PLD_FINEST_AT / smallest) ** 2)
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=coarsened)
    elif accountant == "rdp":
        acc = rdp_privacy_accountant.RdpAccountant()
    else:
        raise ValueError(f"unknown accountant {accountant!r} (pld or rdp)")
    with _quiet_absl():
        acc.compose(event)
        return float(acc.get_epsilon(float(delta)))


class _quiet_absl:
    """dp_accounting's RDP logs (through absl) every order it drops as non-convergent during a σ search; dropping an
    order only loosens that accountant's bound, so the messages are noise for our users."""

    def __enter__(self):
        import logging

        self.logger = logging.getLogger("absl")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)
