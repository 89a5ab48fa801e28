"""Accountants: the interface mechanisms report to, and that cards replay.

A mechanism that adds noise calls ``accountant.record(...)`` with exactly the
parameters it used, in the same object that drew the noise. The list of events
goes on the privacy card (``state_dict``); ``dpconvert audit`` rebuilds the
accountant from it (``load_state_dict``) and recomputes ε from scratch.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Optional

from ..errors import DpconvertError
from ..registry import Registry
from .statements import COVERS_DATA, COVERS_STUDENT, COVERS_STUDENT_AND_LABELS
from .adjacency import ADJACENCY_GENERATOR_PKNN, ADJACENCY_QUERY, ADJACENCY_RECORD, ADJACENCY_RECORD_COMPOSED, ADJACENCY_RECORD_DISJOINT, ADJACENCY_QUERY_GAN_QUERIES  # noqa: F401  (one definition, used by plans and cards)


@dataclass
class Event:
    mechanism: str
    params: dict[str, Any]
    count: int = 1

    def same_kind(self, other: "Event") -> bool:
        return self.mechanism == other.mechanism and self.params == other.params


@dataclass
class Accountant(ABC):
    events: list[Event] = field(default_factory=list)

    name: str = "base"
    mechanisms: tuple[str, ...] = ()
    # The guarantee this accountant proves: what a card built from its events must say (audit derives it from here).
    scope: str = ""
    adjacency: str = ""
    covers: ClassVar[tuple[str, ...]] = ()  # the guarantee.covers a card of these events states (never wider)
    caveats: ClassVar[tuple[str, ...]] = ()  # what such a card must keep in not_covered beyond the standing caveats

    def record(self, mechanism: str, *, count: int = 1, **params: Any) -> None:
        if mechanism not in self.mechanisms:
            raise ValueError(f"{type(self).__name__} cannot account for {mechanism!r}")
        if count == 0:  # nothing was released (e.g. no query passed screening): nothing to compose
            return
        params = {k: (float(v) if isinstance(v, (int, float)) and k not in _INT_PARAMS else v) for k, v in params.items()}
        ev = Event(mechanism, params, int(count))
        if self.events and self.events[-1].same_kind(ev):
            self.events[-1].count += ev.count
        else:
            self.events.append(ev)

    def count(self, mechanism: str) -> int:
        return sum(e.count for e in self.events if e.mechanism == mechanism)

    def events_of(self, part: type["Accountant"]) -> list[Event]:
        """This run's events that ``part`` accounts for (a composed accountant splits its events by mechanism)."""
        return [e for e in self.events if e.mechanism in part.mechanisms]

    @abstractmethod
    def epsilons(self, *, delta: float) -> dict[str, float]:
        """ε by each valid bound, plus ``epsilon`` (the one reported: the minimum)."""

    def epsilon(self, *, delta: float) -> float:
        return self.epsilons(delta=delta)["epsilon"]

    def cross_check(self, *, delta: float):
        """The same ε through an independent library, where the accountant has one (a dict); None: no cross-check."""
        return None

    # The questions every accountant answers (``QUESTIONS``): a number, or None where the scope does not arise for it.
    def record_level_epsilon(self, *, delta: float) -> float:
        """ε under add/remove of one training record of the teacher (or of the private data): the worst case. Where
        the headline is record-level already, it is the headline."""
        if self.scope != "record":
            raise NotImplementedError(f"{type(self).__name__} has a {self.scope}-level headline and must say its record-level worst case")
        return self.epsilon(delta=delta)

    def replace_one_epsilon(self, *, delta: float) -> Optional[float]:
        """ε when one teacher answer is replaced by another; None: the run releases no teacher answers."""
        return None

    def query_level_epsilon(self, *, delta: float) -> Optional[float]:
        """The per-answer bound beside a record-level headline; None where the headline is that bound or none exists."""
        return None

    def queries_record_level_epsilon(self, *, delta: float) -> Optional[float]:
        """What one private record can change in the queries (a generator trained on private records); None: none."""
        return None

    def private_records_epsilon(self, *, delta: float) -> Optional[float]:
        """ε under add/remove of one private record that the run read itself (``private_data``), at ``delta``; None
        when the run read no private records (only the teacher did). A teacher's own guarantee composes with this
        for records the two may share (``auditing/teacher_guarantee.py``)."""
        return None

    def per_image_epsilon(self, *, delta: float, max_rows: int) -> Optional[float]:
        """ε under add/remove of every answer about one public source image that filled at most ``max_rows`` rows;
        None: the accountant releases no per-image rows."""
        return None

    def guarantee_figures(self, *, delta: float) -> dict[str, float]:
        """The card's guarantee figures beside the headline: ``record_level_epsilon`` and each of ``GUARANTEE_QUESTIONS``
        this accountant answers (the audit recomputes exactly these)."""
        out = {"record_level_epsilon": self.record_level_epsilon(delta=delta)}
        for question in GUARANTEE_QUESTIONS:
            value = getattr(self, question)(delta=delta)
            if value is not None:
                out[question] = value
        return out

    def guarantee_keys(self) -> tuple[str, ...]:
        """The guarantee block's keys beyond the common ones that a card of this accountant may carry."""
        empty = type(self)()
        keys = tuple(q for q in GUARANTEE_QUESTIONS if getattr(empty, q)(delta=1e-5) is not None)
        return keys + (("per_image_epsilon",) if empty.per_image_epsilon(delta=1e-5, max_rows=1) is not None else ())

    def state_dict(self) -> dict:
        return {"accountant": self.name, "events": [asdict(e) for e in self.events]}

    def load_state_dict(self, state: dict) -> "Accountant":
        if state.get("accountant") != self.name:
            raise DpconvertError(f"accountant state is for {state.get('accountant')!r}, not {self.name!r}")
        try:
            self.events = [Event(e["mechanism"], dict(e["params"]), int(e["count"])) for e in state["events"]]
        except (KeyError, TypeError) as e:
            raise DpconvertError(f"malformed accountant events ({e}); the card is corrupt") from None
        for e in self.events:
            if e.mechanism not in self.mechanisms or e.count < 0:
                raise DpconvertError(f"accountant {self.name!r} cannot replay event {e.mechanism!r} (count {e.count})")
        return self


_INT_PARAMS = {"batch_size", "k", "num_classes", "teachers"}
# Guarantee figures a card may state beside ``epsilon`` and ``record_level_epsilon`` (the audit recomputes each).
GUARANTEE_QUESTIONS = ("replace_one_epsilon", "query_level_epsilon", "queries_record_level_epsilon")


ACCOUNTANTS: Registry[type] = Registry("accountant")


@ACCOUNTANTS.register("dpdfd")
@dataclass
class DpdfdAccountant(Accountant):
    """Gaussian releases of normalised output gradients (DPDFD).

    Event ``normalised_gaussian_release``: params sigma (noise multiplier:
    std = sigma·clip per entry), clip (row norm C), batch_size (rows per
    release). All events compose exactly into one Gaussian.
    """

    name: str = "dpdfd"
    mechanisms: tuple[str, ...] = ("normalised_gaussian_release",)
    scope: str = "query"
    adjacency: str = ADJACENCY_QUERY
    covers: ClassVar[tuple[str, ...]] = tuple(COVERS_STUDENT)

    def _multiplier(self, scope: str) -> float:
        from . import dpdfd

        return _composed(
            (e.params["sigma"] / dpdfd.sensitivity_factor(scope, int(e.params["batch_size"])), e.count) for e in self.events
        )

    def epsilons(self, *, delta: float, scope: str = "query") -> dict[str, float]:
        from . import gaussian

        eps = gaussian.epsilon(delta, self._multiplier(scope)) if self.events else 0.0
        return {"analytic_gaussian": eps, "epsilon": eps}

    def record_level_epsilon(self, *, delta: float) -> float:
        """Worst case under add/remove of one teacher training record (every answer may change)."""
        return self.epsilons(delta=delta, scope="record")["epsilon"]

    def replace_one_epsilon(self, *, delta: float) -> float:
        """ε when one teacher answer is replaced by another (sensitivity 2C)."""
        return self.epsilons(delta=delta, scope="query_replace")["epsilon"]

    def per_image_epsilon(self, *, delta: float, max_rows: int) -> float:
        """ε under add/remove of every answer about one public source image that filled at most ``max_rows`` rows over
        all releases: release t moves by √m_t·C, so the composition has 1/s² = Σ_t m_t/σ_t² ≤ max_rows / min σ²."""
        from . import gaussian

        if not self.events:
            return 0.0
        sigma = min(e.params["sigma"] for e in self.events)
        if sigma <= 0:
            return math.inf
        return gaussian.epsilon(delta, sigma / math.sqrt(max(1, int(max_rows))))

    def cross_check(self, *, delta: float, scope: str = "query") -> dict[str, float]:
        """The same composition through dp_accounting's PLD and RDP accountants."""
        from . import composition, dpdfd

        terms = [(e.params["sigma"] / dpdfd.sensitivity_factor(scope, int(e.params["batch_size"])), e.count, None) for e in self.events]
        return {key: composition.epsilon(terms, delta, accountant=key) for key in ("pld", "rdp")}


@ACCOUNTANTS.register("dpdfd_per_answer")
@dataclass
class PerAnswerDpdfdAccountant(DpdfdAccountant):
    """DPDFD releases accounted per answer (docs/privacy.md, "Many rounds for the ε of one release").

    Under the query-level adjacency two neighbouring teachers differ in their answer to one input. When no input is
    answered more than ``max_answers`` times over the whole run (the engine checks this exactly, across every
    release), the transcript of any number of adaptively chosen releases is a mixture, with the same weights under
    both teachers, of "that input's rows released" (a Gaussian with L2 sensitivity √m·C) and "never queried" (no
    difference), so it is (√m/σ_min)-GDP: the ε of one release at multiplier σ_min/√m, whatever T is (Feldman &
    Zrnic 2021; Smith & Thakurta 2022; Koskela, Tobaben & Honkela 2023). The record-level worst case still moves
    every row of every release and composes over all of them (``DpdfdAccountant``).
    """

    name: str = "dpdfd_per_answer"
    max_answers: int = 1  # the most times any one input was answered over the whole run (m_max)

    def _multiplier(self, scope: str) -> float:
        from . import dpdfd

        if scope == "record" or not self.events:
            return super()._multiplier(scope)
        sigma = min(e.params["sigma"] for e in self.events)
        return sigma / dpdfd.sensitivity_factor(scope, 1) / math.sqrt(self.max_answers)

    def cross_check(self, *, delta: float, scope: str = "query") -> dict[str, float]:
        """The same single Gaussian through dp_accounting's PLD, and the Rényi-filter bound (RDP of one Gaussian)."""
        from . import composition

        s = self._multiplier(scope)
        return {key: composition.epsilon([(s, 1, None)], delta, accountant=key) for key in ("pld", "rdp")}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "max_answers_per_input": self.max_answers}

    def load_state_dict(self, state: dict) -> "PerAnswerDpdfdAccountant":
        super().load_state_dict(state)
        m = state.get("max_answers_per_input")
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise DpconvertError(fix=f"accountant state max_answers_per_input must be an integer ≥ 1, got {m!r}")
        self.max_answers = m
        return self


@ACCOUNTANTS.register("dpdfd_disjoint_teachers")
@dataclass
class DisjointTeachersDpdfdAccountant(PerAnswerDpdfdAccountant):
    """DPDFD with n teachers trained on disjoint partitions of the private data: a record-level guarantee.

    Each released row is the mean of the n teachers' normalised rows (norm C each; ``NormalisedGaussianRelease`` with
    ``teachers`` = n, recorded on every event by the mechanism that averaged them). One record is in one partition, so
    it changes one teacher, and every row of every release moves by at most 2C/n: over all releases the L2 sensitivity
    is 2C·√(Σ B_t)/n, and the adaptively chosen releases compose as Gaussians ("Differentially Private Data-Free
    Distillation", the multi-teacher extension; the same argument as PATE's). Disjointness is the user's statement
    (``--disjoint-partitions``), recorded on the card. The per-answer (query-level) bound stays beside it."""

    name: str = "dpdfd_disjoint_teachers"
    scope: str = "record"
    adjacency: str = ADJACENCY_RECORD_DISJOINT

    def _record_terms(self) -> list:
        from . import dpdfd

        return [(e.params["sigma"] / dpdfd.sensitivity_factor("record_disjoint", int(e.params["batch_size"]),
                                                              int(e.params.get("teachers", 1))), e.count) for e in self.events]

    def epsilons(self, *, delta: float, scope: str = "record") -> dict[str, float]:
        from . import gaussian

        if scope != "record":
            return super().epsilons(delta=delta, scope=scope)
        eps = gaussian.epsilon(delta, _composed(self._record_terms())) if self.events else 0.0
        return {"analytic_gaussian": eps, "epsilon": eps}

    def record_level_epsilon(self, *, delta: float) -> float:
        """The headline ε is record-level already."""
        return self.epsilon(delta=delta)

    def query_level_epsilon(self, *, delta: float) -> float:
        """The per-answer bound (add/remove one answer of the teacher ensemble), as for one teacher."""
        return super().epsilons(delta=delta, scope="query")["epsilon"]

    def cross_check(self, *, delta: float, scope: str = "record") -> dict[str, float]:
        from . import composition

        if scope != "record":
            return super().cross_check(delta=delta, scope=scope)
        terms = [(s, count, None) for s, count in self._record_terms()]
        return {key: composition.epsilon(terms, delta, accountant=key) for key in ("pld", "rdp")}

    def teachers(self) -> int:
        """The n every release averaged (one value for the whole run)."""
        counts = {int(e.params.get("teachers", 1)) for e in self.events}
        return counts.pop() if len(counts) == 1 else 0


def _composed(pairs) -> float:
    from . import gaussian

    return gaussian.composed_multiplier(pairs)


@ACCOUNTANTS.register("pknn")
@dataclass
class PknnAccountant(Accountant):
    """Private-kNN: Poisson-subsampled screening + noisy argmax.

    Events ``pknn_screening`` (k, num_classes, sigma1, threshold, sampling_rate)
    and ``pknn_argmax`` (sigma2, sampling_rate, num_classes).
    """

    name: str = "pknn"
    mechanisms: tuple[str, ...] = ("pknn_screening", "pknn_argmax")
    scope: str = "record"
    adjacency: str = ADJACENCY_RECORD
    covers: ClassVar[tuple[str, ...]] = tuple(COVERS_STUDENT_AND_LABELS)

    def epsilons(self, *, delta: float, with_pld: bool = True) -> dict[str, float]:
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        from . import pknn

        if not self.events:
            return {"rdp_theorem7_autodp": 0.0, "pld_gaussian_screening": 0.0, "epsilon": 0.0}
        out = {"rdp_theorem7_autodp": float(compute_epsilon(pknn.RDP_ORDERS, self.rdp(), float(delta))[0])}
        if with_pld:
            out["pld_gaussian_screening"] = self._pld(delta)
        out["epsilon"] = min(out.values())
        return out

    def private_records_epsilon(self, *, delta: float) -> float:
        return self.epsilon(delta=delta)

    def rdp(self, orders=None):
        """The RDP curve at ``pknn.RDP_ORDERS`` (the only ``orders`` it has: the screening RDP is tabulated there):
        Theorem-7 screening plus the subsampled argmax, per event."""
        import numpy as np

        from . import pknn

        if orders is not None and tuple(orders) != tuple(pknn.RDP_ORDERS):
            raise ValueError("Private-kNN's RDP curve exists at pknn.RDP_ORDERS only")
        rdp = np.zeros(len(pknn.RDP_ORDERS))
        for e in self.events:
            p = e.params
            if e.mechanism == "pknn_screening":
                rdp += e.count * np.asarray(pknn.subsampled_screening_rdp(int(p["k"]), int(p["num_classes"]), p["sigma1"], p["threshold"], p["sampling_rate"]))
            else:
                rdp += e.count * pknn.subsampled_argmax_rdp(p["sigma2"], p["sampling_rate"])
        return rdp

    def _pld(self, delta: float) -> float:
        from . import composition, pknn

        terms = []
        for e in self.events:
            p = e.params
            if e.mechanism == "pknn_screening":
                terms += pknn.pld_terms(p["sigma1"], 1.0, p["sampling_rate"], e.count, 0)[:1]
            else:
                terms += pknn.pld_terms(1.0, p["sigma2"], p["sampling_rate"], 0, e.count)[1:]
        return composition.epsilon(terms, delta, accountant="pld", discretization=pknn.PLD_DISCRETIZATION)


@ACCOUNTANTS.register("dpsgd")
@dataclass
class DpsgdAccountant(Accountant):
    """DP-SGD (``accounting/dpsgd.py``): events ``gaussian_count`` (sigma: noise std on the record count,
    sensitivity 1) and ``subsampled_gaussian`` (sigma: noise multiplier, clip, sampling_rate), composed by PLD
    (reported) and RDP."""

    name: str = "dpsgd"
    mechanisms: tuple[str, ...] = ("gaussian_count", "subsampled_gaussian")
    scope: str = "record"
    adjacency: str = ADJACENCY_RECORD
    covers: ClassVar[tuple[str, ...]] = tuple(COVERS_STUDENT)

    def terms(self) -> list:
        return [(e.params["sigma"], e.count, e.params["sampling_rate"] if e.mechanism == "subsampled_gaussian" else None) for e in self.events]

    def epsilons(self, *, delta: float) -> dict[str, float]:
        from . import dpsgd

        if not self.events:
            return {"pld": 0.0, "rdp": 0.0, "epsilon": 0.0}
        return dpsgd.epsilons(self.terms(), delta)

    def private_records_epsilon(self, *, delta: float) -> float:
        return self.epsilon(delta=delta)


@ACCOUNTANTS.register("laplace")
@dataclass
class LaplaceAccountant(Accountant):
    """Pure ε-DP Laplace releases (the Adaptive Laplace Mechanism): event ``laplace`` with params scale (b) and
    l1_sensitivity (Δ₁ of the whole released vector under add/remove); ε = Σ count·Δ₁/b by sequential
    composition, for every δ ≥ 0."""

    name: str = "laplace"
    mechanisms: tuple[str, ...] = ("laplace",)
    scope: str = "record"
    adjacency: str = ADJACENCY_RECORD
    covers: ClassVar[tuple[str, ...]] = tuple(COVERS_STUDENT)

    def epsilons(self, *, delta: float = 0.0) -> dict[str, float]:
        eps = sum(e.count * e.params["l1_sensitivity"] / e.params["scale"] if e.params["scale"] > 0 else math.inf for e in self.events)
        return {"laplace_composition": float(eps), "epsilon": float(eps)}

    def private_records_epsilon(self, *, delta: float) -> float:
        return self.epsilon(delta=delta)


@ACCOUNTANTS.register("dpgan")
@dataclass
class DpganAccountant(DpsgdAccountant):
    """The DP-critic GAN (``mechanisms/dp_gan.py``): DP-SGD's accounting without the noisy count (the critic's Adam
    needs no lot-size normaliser): event ``subsampled_gaussian`` per critic step, PLD (reported) and RDP. The
    generator is post-processing of the critic."""

    name: str = "dpgan"
    mechanisms: tuple[str, ...] = ("subsampled_gaussian",)
    covers: ClassVar[tuple[str, ...]] = tuple(COVERS_DATA)  # its own card is a data card (`dpconvert synth`)

    def rdp(self, orders) -> "object":
        """The RDP curve at ``orders`` (for a joint RDP composition with other mechanisms)."""
        import numpy as np
        from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian

        out = np.zeros(len(orders))
        for e in self.events:
            out += e.count * np.asarray(_compute_rdp_poisson_subsampled_gaussian(e.params["sampling_rate"], e.params["sigma"], orders))
        return out


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("dp-accounting", "autodp", "opacus", "scipy", "dpconvert"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "unknown"
    return out
