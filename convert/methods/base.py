"""The interface every method implements, and what it hands to the shared export + card step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional

from dpconvert.errors import DpconvertError, OptionError
from dpconvert.registry import Registry

from dpconvert.accounting.card_blocks import Claims, card_number  # noqa: F401  (re-exported for the methods)
from dpconvert.accounting.plans import Plan, PlanProgress  # noqa: F401  (re-exported for the methods)
from dpconvert.accounting.statements import COVERS_STUDENT, NOT_COVERED  # noqa: F401  (re-exported for the methods)

Callback = Optional[Callable[[dict], None]]
PlanCallback = Optional[Callable[[Plan], None]]


@dataclass
class MethodOutput:
    """A trained student, the accountant its mechanisms reported to, and what the method states about them; the pipeline
    writes the card's guarantee and accounting blocks from these (``accounting/card_blocks.py``) and adds identity and
    export."""

    student: object
    student_name: str
    probe: object  # public/synthetic inputs for the ONNX parity check
    accountant: object  # the accountant the run's mechanisms recorded their events in
    delta: float  # the δ every bound of the card is stated at
    claims: Claims
    mechanism: dict
    warnings: list
    rounds: list
    audit: Optional[dict] = None  # empirical evidence produced during the run (the canary audit)
    extra_files: dict = field(default_factory=dict)  # path → bytes, written all-or-nothing with the model and card
    generator: Optional[object] = None  # DPDFD: the learned generator (Private-kNN's in-run query generator uses it)
    verdict: Optional[dict] = None  # what released quantities say about the student (distill/verdict.py): post-processing


class Method(ABC):
    """A method: its options, its checks, its plan and run, and the claims describing what ran (its module, with an
    ``_options`` module when the options are large; its accountant and card checks are registered beside the others:
    docs/methods.md, "Adding a method")."""

    name: ClassVar[str]  # also the card's mechanism.method (the card schema dispatches mechanism.config on it)
    Options: ClassVar[type]
    summary: ClassVar[str]  # one line for `--method auto`'s explanation and the docs
    listed_at: ClassVar[int] = 100  # its place in `--method` help, the options panels and the docs (smaller: earlier)
    data_free: ClassVar[bool] = False  # runs without private data (`dpconvert.plan` plans the data-free method when none is named)

    @classmethod
    def config_class(cls) -> type:
        """The dataclass whose fields make up the card's ``mechanism.config`` (the options, unless the method writes a
        resolved configuration instead)."""
        return cls.Options
    distributed: ClassVar[bool] = False  # runs under torchrun across processes (convert/distributed.py)
    noise_free: ClassVar[bool] = False  # has a noise-free mode (`no_privacy`: a non-private student for comparison)
    several_teachers: ClassVar[bool] = False  # distils several teachers at once
    # asks the teacher about many inputs (then the pipeline moves it to the faster runtime, io/teacher_runtime.py);
    # the others use its input size and answer the evaluation only, in torch
    queries_teacher: ClassVar[bool] = False
    takes_noise_multiplier: ClassVar[bool] = False  # its noise can be given as `noise_multiplier` instead of `eps`

    def auto_reason(self, run) -> Optional[str]:
        """Why `method` auto picks this method for what ``run`` was given (the reason the card records), or None when
        it does not; the registered methods' rules are disjoint (``methods.choose_method`` asks them in listed order)."""
        return None

    def describe_choice(self, opts, reason: str) -> str:
        """The card's ``method_choice``: why this method ran (``reason``: how it was chosen), with what its options
        change about that (a method whose options make it record-level, or not data-free, says so)."""
        return reason

    def check_distributed(self, run, opts) -> None:
        """Refuse a configuration that cannot run across processes, before anything is loaded."""
        if not self.distributed:
            raise DpconvertError(f"method {self.name} runs in one process only", fix="run it without torchrun")

    def options(self, values: Optional[dict] = None):
        """The method's options from keyword values (flat names: a nested option such as Private-kNN's `gan_critic`
        goes to its sub-options); an unknown name is an error that lists the known ones."""
        from dpconvert.option_fields import from_flat, option_names

        values = dict(values or {})
        known = option_names(self.Options)
        unknown = sorted(set(values) - known)
        if unknown:
            owners = [m for m in METHODS if unknown[0] in option_names(METHODS.get(m).Options)]
            fix = f"choose `method` {owners[0]}" if owners else f"use one of its options: {', '.join('`' + k + '`' for k in sorted(known))}"
            owned = f" (it is an option of {' and '.join(owners)})" if owners else ""
            raise OptionError(f"`{unknown[0]}` is not an option of method {self.name!r}{owned}", fix=fix, param=unknown[0])
        return from_flat(self.Options, values)[0]

    def check(self, run, opts, out=None) -> None:
        """Checks that combine the run's options with the method's (and the output path ``out``), before anything is
        loaded. The pipeline calls it once, before the teacher is loaded; ``run`` does not repeat it."""

    def reads_private_records(self, opts) -> bool:
        """Whether this method, with these options, reads the private records itself (then a DP teacher's guarantee
        composes with the run's for records the two may share: ``auditing/teacher_guarantee.py``)."""
        return True

    @abstractmethod
    def plan(self, run, opts, spec, queries: Optional[int] = None) -> Plan:
        """The privacy plan ``run`` calls before anything private is read: the noise for the target ε (or ε for the given
        noise), ε by each accountant. ``dpconvert.plan`` calls the same method, so the plan is the run's. ``queries``:
        how many queries a query-labelling method will answer (the public images' count; None: its default)."""

    def realised_plan(self, plan: Plan, opts, num_classes: int, answered: Optional[int], n: Optional[int]) -> Plan:
        """The plan as ``dpconvert.plan`` reports it when the caller knows more than the run's defaults: ``n``, the
        private-set size (δ ≤ 1/n is checked); ``answered``, how many queries pass a screening (for methods that
        screen; others refuse it)."""
        from dpconvert.accounting.planning import check_delta

        if answered is not None:
            raise OptionError(f"`answered` is for methods that screen their queries; method {self.name} answers every query", fix="drop `answered`", param="answered")
        if n is not None:
            check_delta(plan.delta, n)
        return plan

    @abstractmethod
    def run(self, ctx, opts, teacher, on_plan: PlanCallback = None, on_progress: Callback = None) -> MethodOutput:
        """Plan (report it through ``on_plan`` before any private data is touched), run the mechanism, describe it.
        ``ctx``: the ``RunContext`` the pipeline built (options, noise stream, seed streams, world, private records)."""


METHODS: Registry[Method] = Registry("method", param="method")


def register(cls):
    METHODS.register(cls.name)(cls())
    return cls


def noise_probe(spec, run):
    """Inputs for the ONNX parity check that carry no private record: uniform noise in [−1, 1] from the seed."""
    import torch

    return torch.rand(run.parity_inputs, *spec.shape, generator=torch.Generator().manual_seed(run.seed)) * 2 - 1
