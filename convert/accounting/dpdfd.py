"""DPDFD accounting (docs/privacy.md): pure maths on (σ, T, B).

Each DPDFD step releases the B×K matrix of per-row normalised output
gradients (row norm C) plus N(0, σ²C²) on every entry. Three adjacencies,
named explicitly on the card:

* ``query`` (add/remove one teacher answer): one row appears or vanishes,
  L2 sensitivity C → noise multiplier σ per step.
* ``query, replace-one`` (one teacher answer changes): one row moves to any
  other norm-C row, sensitivity 2C → multiplier σ/2.
* ``record`` worst case (add/remove one private training record): a
  non-private teacher may change every answer, so all B rows may move by 2C,
  sensitivity 2C·√B → multiplier σ/(2√B).
* ``record_disjoint`` (several teachers trained on disjoint partitions of the
  private data, each row the mean of the n teachers' normalised rows): one
  record changes one teacher, every row moves by at most 2C/n, sensitivity
  2C·√B/n → multiplier σ·n/(2√B).

T steps compose to one Gaussian with multiplier σ/√T (exact, analytic).
"One teacher answer is one row" needs the inputs of a step to be distinct;
``Dpdfd.distinct_queries`` redraws repeats (an input k times in one step would
have sensitivity √k·C).
"""

from __future__ import annotations

import math

from . import gaussian
from .adjacency import ADJACENCY_QUERY, ADJACENCY_RECORD_DISJOINT  # noqa: F401  (one definition, used by plans and cards)

ADJACENCY_RECORD = "add/remove one record of the teacher's private training set (worst case: every answer of every step may change)"


def sensitivity_factor(scope: str, batch_size: int, teachers: int = 1) -> float:
    """Per-step L2 sensitivity in units of C (``teachers``: the n whose normalised rows each released row averages)."""
    if scope == "query":
        return 1.0
    if scope == "query_replace":
        return 2.0
    if scope == "record":
        return 2.0 * math.sqrt(batch_size)
    if scope == "record_disjoint":
        return 2.0 * math.sqrt(batch_size) / teachers
    raise ValueError(f"unknown scope {scope!r}")


def epsilon(*, sigma: float, steps: int, delta: float, batch_size: int = 1, scope: str = "query", teachers: int = 1) -> float:
    """Exact ε of T steps (analytic Gaussian)."""
    if steps <= 0:
        return 0.0
    if sigma <= 0:
        return math.inf
    s = sigma / sensitivity_factor(scope, batch_size, teachers) / math.sqrt(steps)
    return gaussian.epsilon(delta, s)


def epsilon_pld(*, sigma: float, steps: int, delta: float, batch_size: int = 1, scope: str = "query", teachers: int = 1) -> float:
    """Cross-check with dp_accounting's privacy-loss-distribution accountant."""
    from . import composition

    return composition.epsilon([(sigma / sensitivity_factor(scope, batch_size, teachers), steps, None)], delta, accountant="pld")


def epsilon_rdp(*, sigma: float, steps: int, delta: float, batch_size: int = 1, scope: str = "query", teachers: int = 1) -> float:
    """Cross-check with dp_accounting's RDP accountant (always ≥ the exact ε)."""
    from . import composition

    return composition.epsilon([(sigma / sensitivity_factor(scope, batch_size, teachers), steps, None)], delta, accountant="rdp")
