"""The card's guarantee and accounting blocks, written once for every method.

A method hands over the accountant its mechanisms reported to (the numbers) and its :class:`Claims` (what the
guarantee covers, how the noise was calibrated); every ε on the card is computed here, from that accountant, after
:func:`check_spent` has replayed its recorded events the way ``dpconvert audit`` does. No method writes an ε itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..errors import InternalError


@dataclass
class Claims:
    """What a method states about its guarantee beside its accountant's numbers."""

    covers: list
    not_covered: list
    calibrated: bool  # the noise was calibrated to `target_epsilon` (else σ was given and ε computed)
    target_epsilon: Optional[float]
    note: Optional[str] = None  # how the accountant composes this method's events, for a person reading the card
    extra: dict = field(default_factory=dict)  # figures that need the run's facts besides the events (DPDFD: per_image_epsilon)


def card_number(v):
    """JSON has no infinity: ε = ∞ (no noise) is written as the string "inf"."""
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def check_spent(accountant, *, delta: float, target: Optional[float]) -> float:
    """ε of the run, before anything is written: recomputed from the events as the card records them (the accountant
    the audit replays, rebuilt from ``state_dict``), equal to the live accountant's, and within the target the noise
    was calibrated to. Every method's run and Private-kNN's in-run DPDFD generator pass through here."""
    from . import ACCOUNTANTS

    state = accountant.state_dict()
    replayed = ACCOUNTANTS.get(state["accountant"])().load_state_dict(state).epsilon(delta=delta)
    live = accountant.epsilon(delta=delta)
    same = (math.isinf(live) and math.isinf(replayed)) or math.isclose(replayed, live, rel_tol=1e-9, abs_tol=1e-12)
    if not same:
        raise InternalError(f"the recorded events give ε={replayed} but the accountant says ε={live}; nothing was written")
    if target is not None and replayed > target * (1 + 1e-9):
        raise InternalError(f"ε spent {replayed} exceeds the target {target}; nothing was written")
    return replayed


def guarantee_block(accountant, delta: float, claims: Claims) -> dict:
    """ε, δ, the scope and adjacency the accountant proves, the record-level worst case and the other figures the
    accountant answers (``Accountant.guarantee_figures``: what the audit recomputes), and what is covered."""
    return {
        "epsilon": card_number(accountant.epsilon(delta=delta)), "delta": delta, "scope": accountant.scope, "adjacency": accountant.adjacency,
        **{k: card_number(v) for k, v in accountant.guarantee_figures(delta=delta).items()},
        **{k: card_number(v) for k, v in claims.extra.items()},
        "covers": list(claims.covers), "not_covered": list(claims.not_covered),
    }


def accounting_block(accountant, delta: float, claims: Claims) -> dict:
    """Which accountant, ε by each of its bounds (and an independent library's cross-check where it has one), the
    library versions, the calibration and the events the audit replays."""
    from . import library_versions

    epsilons = accountant.epsilons(delta=delta)
    block = {"accountant": accountant.name, "epsilons": {k: card_number(v) for k, v in epsilons.items() if k != "epsilon"}}
    cross = accountant.cross_check(delta=delta) if math.isfinite(epsilons["epsilon"]) else {}
    if cross is not None:
        block["cross_check"] = {k: card_number(v) for k, v in cross.items()}
    block.update({"libraries": library_versions(), "calibrated": claims.calibrated, "target_epsilon": claims.target_epsilon,
                  "state": accountant.state_dict()})
    if claims.note:
        block["note"] = claims.note
    return block
