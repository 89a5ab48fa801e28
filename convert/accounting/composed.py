"""Accountants composed from parts: one run, several mechanisms, each accounted by its own accountant.

A composition names its parts (label → accountant class; each part holds the events of its own mechanisms) and, for
each question a card asks (the headline ε, the record-level worst case, the replace-one bound, …), which of the parts'
answers add up to it. The terms of one question compose by basic composition with δ split evenly among them (one term
keeps the whole δ): valid for adaptive composition, where a later part's inputs depend on an earlier part's output (the
queries depend on the generator), as dp-accounting's ``ComposedDpEvent`` composes its events. Where the composition
allows it (``joint_rdp``: every part bounds the same records and has an RDP curve), one RDP composition of all the
terms' events converted once at δ is a second valid bound, and the smaller is reported.

A question no composition names has no answer (None: not applicable). The record-level worst case of a record-level
composition is its headline. A new query source that costs privacy is one ``compose(...)`` call here, not a class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from .accountant import ACCOUNTANTS, Accountant, DpdfdAccountant, DpganAccountant, PerAnswerDpdfdAccountant, PknnAccountant
from .adjacency import ADJACENCY_GENERATOR_PKNN, ADJACENCY_QUERY_GAN_QUERIES, ADJACENCY_RECORD_COMPOSED
from .statements import COVERS_STUDENT, COVERS_STUDENT_AND_LABELS, NOT_COVERED_GAN_QUERIES

Term = tuple[str, str]  # (part label, the question asked of that part)


@dataclass(frozen=True)
class Composition:
    parts: tuple[tuple[str, type], ...]  # (label, accountant class), in the order ``parts()`` returns them
    answers: dict[str, tuple[Term, ...]]  # question ("epsilon" = the headline) → the terms that add up to it
    joint_rdp: bool = False


@dataclass
class ComposedAccountant(Accountant):
    composition: ClassVar[Composition]
    settings: dict = field(default_factory=dict)  # the parts' own state beyond their events (e.g. max_answers_per_input)

    def __post_init__(self) -> None:
        for _, cls in self.composition.parts:  # a fresh part's defaults, unless the card's state says otherwise
            self.settings = {**_extra_state(cls().state_dict()), **self.settings}

    # ------------------------------------------------------------ parts
    def part(self, label: str) -> Accountant:
        cls = dict(self.composition.parts)[label]
        state = cls(events=self.events_of(cls)).state_dict()
        state.update({k: v for k, v in self.settings.items() if k in state})
        return cls().load_state_dict(state)

    def parts(self) -> tuple[Accountant, ...]:
        return tuple(self.part(label) for label, _ in self.composition.parts)

    def _answer(self, label: str, question: str, delta: float, **kw) -> float:
        part = self.part(label)
        return part.epsilon(delta=delta) if question == "epsilon" else getattr(part, question)(delta=delta, **kw)

    def _combined(self, question: str, *, delta: float, **kw) -> Optional[dict[str, float]]:
        """Each term at its δ share (keyed by part), the basic composition, the joint RDP bound where allowed, and
        ``epsilon`` (the smallest valid bound); None when the composition does not answer ``question``."""
        terms = self.composition.answers.get(question)
        if not terms:
            return None
        if len(terms) == 1:
            (label, q), = terms
            part = self.part(label)
            return part.epsilons(delta=delta) if q == "epsilon" else {"epsilon": self._answer(label, q, delta, **kw)}
        share, out, total = delta / len(terms), {}, 0.0
        for label, q in terms:
            part = self.part(label)
            breakdown = part.epsilons(delta=share) if q == "epsilon" else {"epsilon": self._answer(label, q, share, **kw)}
            out[f"{label}_{part.scope if q == 'epsilon' else q}"] = breakdown["epsilon"]  # the part at its δ share
            if len(breakdown) > 2:  # the part's own valid bounds, where it has several
                out.update({f"{label}_{k}": v for k, v in breakdown.items() if k != "epsilon"})
            total += breakdown["epsilon"]
        out[BASIC] = total
        if self.composition.joint_rdp and all(q == "epsilon" for _, q in terms):
            out[JOINT] = self._joint_rdp([label for label, _ in terms], delta)
        out["epsilon"] = min(out[k] for k in (BASIC, JOINT) if k in out)
        return out

    def _joint_rdp(self, labels: list[str], delta: float) -> float:
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        from . import composition, pknn

        orders = pknn.RDP_ORDERS  # the grid Private-kNN's screening RDP is tabulated on
        curve = sum(self.part(label).rdp(orders) for label in labels)
        with composition._quiet_absl():
            return float(compute_epsilon(orders, curve, float(delta))[0])

    # ------------------------------------------------------------ the questions
    def epsilons(self, *, delta: float) -> dict[str, float]:
        return self._combined("epsilon", delta=delta)

    def _value(self, question: str, *, delta: float, **kw) -> Optional[float]:
        out = self._combined(question, delta=delta, **kw)
        return None if out is None else out["epsilon"]

    def record_level_epsilon(self, *, delta: float) -> float:
        value = self._value("record_level_epsilon", delta=delta)
        return super().record_level_epsilon(delta=delta) if value is None else value

    def replace_one_epsilon(self, *, delta: float) -> Optional[float]:
        return self._value("replace_one_epsilon", delta=delta)

    def query_level_epsilon(self, *, delta: float) -> Optional[float]:
        return self._value("query_level_epsilon", delta=delta)

    def queries_record_level_epsilon(self, *, delta: float) -> Optional[float]:
        return self._value("queries_record_level_epsilon", delta=delta)

    def private_records_epsilon(self, *, delta: float) -> Optional[float]:
        return self._value("private_records_epsilon", delta=delta)

    def per_image_epsilon(self, *, delta: float, max_rows: int) -> Optional[float]:
        return self._value("per_image_epsilon", delta=delta, max_rows=max_rows)

    def cross_check(self, *, delta: float):
        """A one-term headline is its part's ε, so it has that part's cross-check; a sum of parts has none."""
        terms = self.composition.answers["epsilon"]
        return self.part(terms[0][0]).cross_check(delta=delta) if len(terms) == 1 else None

    def whole_bounds(self, epsilons: dict[str, float]) -> dict[str, float]:
        """The bounds in ``epsilons`` that are on the whole composition (not on one part)."""
        return {k: v for k, v in epsilons.items() if k in (BASIC, JOINT)}

    # ------------------------------------------------------------ card state
    def state_dict(self) -> dict:
        return {**super().state_dict(), **self.settings}

    def load_state_dict(self, state: dict) -> "ComposedAccountant":
        from ..errors import DpconvertError

        super().load_state_dict(state)
        missing = sorted(set(self.settings) - set(state))
        if missing:
            raise DpconvertError(f"accountant state of {self.name!r} lacks {', '.join(missing)}; the card is corrupt")
        self.settings = {k: state[k] for k in self.settings}
        self.parts()  # each part validates its own state (e.g. max_answers_per_input ≥ 1)
        return self


BASIC, JOINT = "basic_composition_half_delta_each", "rdp_joint"


def _extra_state(state: dict) -> dict:
    return {k: v for k, v in state.items() if k not in ("accountant", "events")}


def compose(name: str, composition: Composition, *, scope: str, adjacency: str, covers: list, doc: str, caveats: tuple = (),
            registry=ACCOUNTANTS) -> type:
    """Register the composition as the accountant ``name`` in ``registry`` (its parts' mechanisms must not overlap:
    each event belongs to one part)."""
    mechanisms = tuple(m for _, cls in composition.parts for m in cls.mechanisms)
    if len(set(mechanisms)) != len(mechanisms):
        raise ValueError(f"{name}: two parts account for the same mechanism")
    if any(len(terms) > 2 for terms in composition.answers.values()):
        raise ValueError(f"{name}: basic composition here splits δ in halves (two terms at most)")
    cls = dataclass(type(name, (ComposedAccountant,), {
        "__doc__": doc, "__annotations__": {"name": str, "mechanisms": tuple, "scope": str, "adjacency": str},
        "name": name, "mechanisms": mechanisms, "scope": scope, "adjacency": adjacency, "composition": composition}))
    cls.covers, cls.caveats = tuple(covers), tuple(caveats)  # what its cards state (ClassVars: not dataclass fields)
    return registry.register(name)(cls)


GeneratorPknnAccountant = compose(
    "pknn+dpdfd_generator",
    Composition(parts=(("dpdfd_generator", DpdfdAccountant), ("pknn", PknnAccountant)), answers={
        "epsilon": (("dpdfd_generator", "epsilon"), ("pknn", "epsilon")),
        "record_level_epsilon": (("dpdfd_generator", "record_level_epsilon"), ("pknn", "epsilon")),
        "private_records_epsilon": (("pknn", "epsilon"),),  # the generator is post-processing of the teacher's answers
    }),
    scope="query", adjacency=ADJACENCY_GENERATOR_PKNN, covers=COVERS_STUDENT_AND_LABELS,
    doc="""Private-kNN labels on queries drawn from a DPDFD-trained generator: the generator's cost is its DPDFD run's
    events (replayed from the saved generator), the labels' the Private-kNN events; headline query-level (the DPDFD part
    is only query-level), its record-level worst case uses the DPDFD worst case.""")

DpganPknnAccountant = compose(
    "pknn+dpgan",
    Composition(parts=(("dpgan", DpganAccountant), ("pknn", PknnAccountant)), answers={
        "epsilon": (("dpgan", "epsilon"), ("pknn", "epsilon")),
        "private_records_epsilon": (("dpgan", "epsilon"), ("pknn", "epsilon")),
    }, joint_rdp=True),
    scope="record", adjacency=ADJACENCY_RECORD_COMPOSED, covers=COVERS_STUDENT_AND_LABELS,
    doc="""Private-kNN labels on queries from a DP-critic GAN trained on the same private data: both parts
    record-level, so besides basic composition one RDP composition of the critic steps with the Private-kNN events
    (Theorem-7 screening RDP + subsampled argmax RDP) holds, converted once at δ; the smaller is reported.""")

DpganDpdfdAccountant = compose(
    "dpdfd_per_answer+dpgan",
    Composition(parts=(("dpdfd", PerAnswerDpdfdAccountant), ("dpgan", DpganAccountant)), answers={
        # query level: the GAN never sees the teacher, so its events are identical under neighbouring teachers
        "epsilon": (("dpdfd", "epsilon"),),
        "replace_one_epsilon": (("dpdfd", "replace_one_epsilon"),),
        "per_image_epsilon": (("dpdfd", "per_image_epsilon"),),
        # one private record changes the critic's releases; the queries (and the GAN samples) are post-processing
        "queries_record_level_epsilon": (("dpgan", "epsilon"),),
        "private_records_epsilon": (("dpgan", "epsilon"),),
        # a record may also change the teacher arbitrarily: every DPDFD row may move, besides the critic
        "record_level_epsilon": (("dpdfd", "record_level_epsilon"), ("dpgan", "epsilon")),
    }),
    scope="query", adjacency=ADJACENCY_QUERY_GAN_QUERIES, covers=COVERS_STUDENT, caveats=(NOT_COVERED_GAN_QUERIES,),
    doc="""DPDFD (per answer) whose queries are samples of a GAN with a DP critic trained on private records: the
    headline is the per-answer DPDFD bound, the queries' record-level ε the critic's, the record-level worst case both.""")
