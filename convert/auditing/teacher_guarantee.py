"""A teacher that was itself trained with DP passes its record-level guarantee on, only where it holds. No torch.

A student distilled from a teacher without private data depends on the teacher's training records only through the
teacher, so whatever record-level (ε_T, δ_T) the teacher has, the student has too (post-processing). A run that also
reads private records itself (``private_data``: DP-SGD, Private-kNN, AdLM, a DP-critic GAN's queries) cannot know
that those records are not the teacher's: for a record in both, the student depends on it through the teacher and
through the run's own mechanism, so the two compose (basic composition, valid adaptively: ε_T + ε_run at
δ_T + δ_run, ε_run being the run's record-level ε for the records it read, at the run's δ). Only the user can state
that the two data sets are disjoint (``private_data_is_not_teacher_data``); the card records it as the user's
statement, as it does disjoint partitions, and then the teacher's records keep the teacher's guarantee.

dpconvert records an inherited guarantee only from a teacher card it verified like ``dpconvert audit`` does (ε
recomputed from its events, a record-level scope, secret noise, a δ within the ceiling, the teacher's graph matching
the card's hash; a signature by a trusted key when keys are given). Every field of the student card's
``teacher.guarantee`` block is derived here, by the one function the conversion and the audit both call, from the
embedded teacher card, the student card's own accountant and the user's statement: the audit compares them all.
"""

from __future__ import annotations

from typing import Optional

NOTE_POST_PROCESSING = ("the student depends on the teacher's training records only through the teacher: post-processing of the "
                        "teacher's guarantee")
NOTE_COMPOSED = ("this run also read private records itself (`private_data`), which may be the teacher's training records: for a record "
                 "in both, the teacher's guarantee and this run's record-level guarantee compose (ε = ε_teacher + ε_run, δ = δ_teacher + δ_run)")
NOTE_DECLARED = ("this run also read private records, which the user states are not the teacher's training data "
                 "(`private_data_is_not_teacher_data`: the user's statement, not checked by dpconvert); the teacher's training records "
                 "keep the teacher's guarantee (post-processing), the run's records have the run's own")
# the teacher kinds whose file can carry a card that binds it (an ONNX graph with its card in the metadata, or beside it)
KINDS_WITH_CARDS = ("onnx",)


def guarantee_block(teacher_card: dict, teacher_epsilon: float, *, run_records_epsilon: Optional[float], run_delta: float,
                    not_teacher_data: bool) -> dict:
    """The ``teacher.guarantee`` block. ``teacher_epsilon``: the teacher card's ε as its events give it (recomputed by
    the caller: ``card_checks.check_card``). ``run_records_epsilon``: the run's record-level ε for the private records
    it read itself (``Accountant.private_records_epsilon`` at ``run_delta``), None when it read none.
    ``not_teacher_data``: the user's statement that those records are not the teacher's."""
    eps_t, delta_t = float(teacher_epsilon), float(teacher_card["guarantee"]["delta"])
    reads = run_records_epsilon is not None
    composed = reads and not not_teacher_data
    block = {"epsilon": eps_t + run_records_epsilon if composed else eps_t, "delta": delta_t + run_delta if composed else delta_t,
             "scope": "record", "adjacency": teacher_card["guarantee"]["adjacency"], "accountant": teacher_card["accounting"]["accountant"],
             "model_sha256": teacher_card["model"]["sha256"], "teacher_epsilon": eps_t, "teacher_delta": delta_t,
             "run_reads_private_records": reads}
    if composed:
        block.update(run_epsilon=float(run_records_epsilon), run_delta=float(run_delta))
    if reads:
        block["private_data_is_not_teacher_data"] = bool(not_teacher_data)
    block["note"] = NOTE_COMPOSED if composed else NOTE_DECLARED if reads else NOTE_POST_PROCESSING
    block["card"] = teacher_card
    return block


def run_records_epsilon(accountant, delta: float) -> Optional[float]:
    """The student card's own ε for the private records its run read (None: it read none)."""
    v = accountant.private_records_epsilon(delta=delta)
    return None if v is None else float(v)


def planned_records(teacher_card: dict, teacher_epsilon: float, plan, reads_private_records: bool, not_teacher_data: bool) -> dict:
    """What ``plan`` prints for the teacher's training records before the run: the same derivation as the card, with
    the planned ε of the records the run reads (the GAN's own scope for DPDFD on GAN queries, else the headline, which
    for a query generator composed with Private-kNN is an upper bound of the labels' part)."""
    own_scope = plan.queries_record_level_epsilon
    eps_run = (plan.epsilon if own_scope is None else own_scope) if reads_private_records else None
    b = guarantee_block(teacher_card, teacher_epsilon, run_records_epsilon=eps_run, run_delta=float(plan.delta), not_teacher_data=not_teacher_data)
    return {k: v for k, v in b.items() if k not in ("card", "adjacency", "accountant", "model_sha256", "scope")}
