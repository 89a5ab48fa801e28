"""What every release states and how its card is made: one place for a model (``pipeline.py``) and a synthetic data
set (``synth.py``).

Both go through ``release_card``: the ε the events give is checked against the target before anything is written
(``check_spent``), the card's skeleton (schema, version, time, command, seed), its guarantee and accounting blocks
(``accounting/card_blocks.py``, the only writer of an ε), the warnings every release owes (seeded noise, a large δ,
statistics published outside the accounting), validation against the schema, and the signature. The caller says
what it releases (its identity blocks, e.g. ``model`` and ``teacher`` or ``data``) and writes the files, all or
nothing (``io/atomic.py``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Optional


def large_delta_warnings(delta: float) -> list[str]:
    """The warning a δ above the ceiling needs (only with ``allow_large_delta``; the audit fails it unless its policy
    admits this δ)."""
    from .accounting.statements import DELTA_CEILING, LARGE_DELTA_PREFIX

    if delta <= DELTA_CEILING:
        return []
    return [f"{LARGE_DELTA_PREFIX} {DELTA_CEILING:g}: δ = {delta:g} (allowed by `allow_large_delta`); the guarantee may fail "
            "outright with this probability"]


def release_card(*, identity: dict, accountant, delta: float, target: Optional[float], claims, mechanism: dict, rest: dict,
                 warnings: list, command: Optional[str], seed: int, card_format: Optional[str] = None, signing_key=None,
                 what: str = "generated card"):
    """The validated (and, with ``signing_key``, signed) ``PrivacyCard`` of a release.

    ``identity``: the blocks that say what is released (``model`` + ``teacher``, or ``data``), placed after the
    skeleton; ``rest``: the blocks after ``mechanism`` (utility, export, run, …; ``empirical`` for a data set).
    ``warnings``: the caller's own (the method's, the noise stream's); a large δ's is added here."""
    from .accounting.card_blocks import accounting_block, check_spent, guarantee_block
    from .version import __version__
    from .zoo_cards import SCHEMA_VERSION, PrivacyCard

    check_spent(accountant, delta=delta, target=target)  # before anything is written
    card = PrivacyCard({
        "schema_version": SCHEMA_VERSION,
        **({"format": card_format} if card_format else {}),
        "dpconvert_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "seed": seed,
        **identity,
        "guarantee": guarantee_block(accountant, delta, claims),
        "accounting": accounting_block(accountant, delta, claims),
        "mechanism": mechanism,
        **rest,
        "warnings": list(warnings) + large_delta_warnings(delta),
    }).validate(what)
    if signing_key is not None:
        from .zoo_cards.signing import sign_card

        card = sign_card(card, signing_key)
    return card
