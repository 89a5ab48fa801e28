"""A teacher that was itself trained with DP passes its record-level guarantee on ("Finish what the method papers
describe", inherited guarantees). No torch.

A student distilled from a teacher without private data depends on the private records only through the teacher, so
whatever record-level (ε, δ) the teacher has, the student has too (post-processing). dpconvert records that only
from a teacher card it verified like ``dpconvert audit`` does: every field consistent with its accountant events (ε
recomputed), a record-level scope, secret noise, a δ within the ceiling, the teacher's weights matching the card's
hash, and a signature by a trusted key when keys are given. The student's card then carries ``teacher.trained_with_dp:
true`` and a ``teacher.guarantee`` block holding the whole teacher card, which the audit verifies again.
"""

from __future__ import annotations

from typing import Optional

from dpconvert.errors import DpconvertError


def inherited_guarantee(data: dict, graph_sha256: str, trusted: Optional[dict] = None) -> dict:
    """The ``teacher.guarantee`` block for a verified teacher card, or a ``DpconvertError`` that says why not."""
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.signing import verify_card

    from .card_checks import teacher_card_problem

    problem = teacher_card_problem(data, graph_sha256)
    if problem:
        raise DpconvertError(f"the teacher's privacy card cannot be passed on: {problem}")
    card = PrivacyCard(data)
    status, detail = verify_card(card, trusted)
    if trusted is not None and status != "valid":
        raise DpconvertError(f"the teacher's privacy card cannot be passed on: {detail}")
    from .card_checks import check_card

    true, _ = check_card(data)
    return {"epsilon": true["epsilon"], "delta": card.delta, "scope": "record", "adjacency": data["guarantee"]["adjacency"],
            "accountant": data["accounting"]["accountant"], "model_sha256": graph_sha256, "signature": detail,
            "note": "the student depends on the teacher's private records only through the teacher: post-processing of its guarantee",
            "card": data}
