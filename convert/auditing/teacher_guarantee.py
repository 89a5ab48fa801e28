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

import math
from typing import Optional

from dpconvert.errors import DpconvertError


def teacher_card_problem(data: dict, graph_sha256: Optional[str]) -> Optional[str]:
    """None when ``data`` is a teacher card whose record-level guarantee can be passed on, else why not (one line)."""
    from dpconvert.accounting.statements import DELTA_CEILING
    from dpconvert.zoo_cards import PrivacyCard

    from .card_checks import check_card, noise_blocks

    try:
        card = PrivacyCard(data).validate("teacher card")
    except DpconvertError as e:
        return str(e)
    if card.kind != "model":
        return "it is a data set's card, not a model's"
    true, problems = check_card(card.data)
    if problems:
        return f"{problems[0][0]}: {problems[0][1]}"
    if true["scope"] != "record":
        return f"its accountant proves a {true['scope']}-level guarantee; only a record-level one passes to a student"
    if not math.isfinite(true["epsilon"]):
        return "its ε is infinite"
    if any(m.get("noise_secret") is not True for _, m in noise_blocks(card.data)):
        return "its noise was not secret (seeded)"
    if card.delta > DELTA_CEILING:
        return f"its δ = {card.delta:g} is above the ceiling {DELTA_CEILING:g}"
    if graph_sha256 is not None and card.model_sha256 != graph_sha256:
        return "the teacher's weights do not match its card's model hash (the file changed after its card was written)"
    return None


def inherited_guarantee(data: dict, graph_sha256: str, trusted: Optional[dict] = None) -> dict:
    """The ``teacher.guarantee`` block for a verified teacher card, or a ``DpconvertError`` that says why not."""
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.signing import verify_card

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
