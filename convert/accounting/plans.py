"""Typed privacy plans: what a run will release and what it costs, before anything private is read.

A method's ``plan`` returns one of these; the run reads its noise from it, the CLI prints it (its mechanism rows, then
the ε rows every plan has), ``dpconvert plan`` returns it and ``--json`` prints :meth:`Plan.to_dict`. The guarantee
figures are the ones every accountant answers (``Accountant.GUARANTEE_QUESTIONS``): a number, or None where the
question does not apply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar, Optional


@dataclass(frozen=True)
class PlanProgress:
    """A method whose run is one progress bar says so in its plan."""

    label: str
    total: int
    unit: str = "steps"


@dataclass(kw_only=True)
class Plan:
    """The figures every plan has; a method's plan adds its mechanism's parameters (the subclasses below)."""

    # plan field → the card's mechanism key that must carry the same value once the run is done: what `dpconvert plan`
    # printed is what ran (the pipeline checks it after every run; the contract tests compare `plan` with `convert`)
    card_keys: ClassVar[dict] = {}
    method: str
    epsilon: float  # the headline ε, in ``scope`` under ``adjacency``
    delta: float
    scope: str
    adjacency: str
    calibrated: bool  # the noise was calibrated to ``target_epsilon`` (False: ε computed from given noise)
    target_epsilon: Optional[float] = None
    accountants: dict = field(default_factory=dict)  # ε by each accountant that bounds the headline
    replace_one_epsilon: Optional[float] = None
    query_level_epsilon: Optional[float] = None  # beside a record-level headline: one answer's
    record_level_epsilon: Optional[float] = None  # beside a query-level headline: the worst case for one record
    queries_record_level_epsilon: Optional[float] = None  # queries made from private records: their own scope
    progress: Optional[PlanProgress] = None
    # what the pipeline adds before the plan is shown
    method_choice: Optional[str] = None
    teacher_input: Optional[str] = None
    teacher_records: Optional[dict] = None

    def mechanism_rows(self) -> list[tuple[str, str]]:
        """(quantity, value) rows the plan table prints above the ε rows."""
        return []

    def notes(self) -> list[str]:
        """Lines the CLI prints under the plan table about what the mechanism's parameters imply."""
        return []

    def to_dict(self) -> dict:
        """The plan as JSON (``dpconvert plan --json``): figures that do not apply are left out."""
        return {k: v for k, v in asdict(self).items() if v is not None or k == "target_epsilon"}


def _sigma_text(sigma: float, calibrated: bool) -> str:
    return f"{sigma:.4f}" + (" (calibrated)" if calibrated else "")


@dataclass(kw_only=True)
class DpdfdPlan(Plan):
    card_keys: ClassVar[dict] = {"sigma": "sigma", "steps": "releases", "batch_size": "batch_size"}
    method: str = "dpdfd"
    accountant: str
    sigma: float
    steps: int  # T noisy releases
    batch_size: int  # B rows per release
    teachers: Optional[int] = None  # n teachers on disjoint partitions
    student_epochs: Optional[int] = None
    answers_per_target: Optional[float] = None  # what each target the student learns from averages (distill/verdict.py)
    target_noise_to_signal: Optional[float] = None
    gan_sigma: Optional[float] = None  # `generator` dpgan: the DP critic's noise, and how many of its samples are queried
    gan_images: Optional[int] = None
    time_budget: Optional[float] = None  # minutes B is sized to from the teacher's measured speed (convert), if it is
    rows_sized: bool = False  # B above was sized to `time_budget` (convert); False: the plan's B is the reference
    over_budget: bool = False  # even the fewest rows `time_budget` sizes to take longer than it here
    prior_trial_rows: int = 0  # rows of the prior trial's release before the main one (methods/prior_trial.py)

    def mechanism_rows(self) -> list[tuple[str, str]]:
        from dpconvert.zoo_cards.figures import eps_text

        rows = [("noise multiplier σ", _sigma_text(self.sigma, self.calibrated)), ("noisy releases T", str(self.steps)),
                ("batch size B", str(self.batch_size))]
        if self.teachers is not None:
            rows.append(("teachers n (disjoint partitions)", str(self.teachers)))
        if self.prior_trial_rows:
            rows.append(("prior trial rows (before T)", str(self.prior_trial_rows)))
        if self.queries_record_level_epsilon is not None:  # `generator` dpgan: the GAN's own record-level scope
            rows += [("DP-critic GAN σ", f"{self.gan_sigma:.4f}"), ("GAN samples queried", str(self.gan_images)),
                     ("queries' record-level ε", eps_text(self.queries_record_level_epsilon))]
        return rows

    def notes(self) -> list[str]:
        return self._rows_notes() + self._target_notes()

    def _rows_notes(self) -> list[str]:
        if self.time_budget is None:
            return []
        if self.over_budget:
            return [f"B = {self.batch_size:,}, the fewest answers a budget sizes B to, take longer than {self.time_budget:g} minutes at this "
                    "machine's measured speed (the estimate below): give a larger `time_budget`, a smaller `batch_size`, or a GPU"]
        if self.rows_sized:
            return [f"B = {self.batch_size:,}: the answers that fit a {self.time_budget:g}-minute budget at this machine's measured speed "
                    f"(`batch_size` {self.batch_size} repeats them anywhere; `time_budget` changes them)"]
        return [f"convert sizes B to a {self.time_budget:g}-minute budget from the teacher's speed on this machine; B and the "
                f"default δ above are for {self.batch_size:,} rows"]

    def _target_notes(self) -> list[str]:
        if self.target_noise_to_signal is None:  # public images: counted when they are loaded
            return []
        a, nsr = self.answers_per_target, self.target_noise_to_signal
        if a > 1:
            return [f"each target the student learns from averages {a:,.0f} answers: noise-to-signal power ≥ {nsr:.3g} (about 1 or "
                    "less makes a usable target)"]
        return [f"one answer per target, noise-to-signal power {nsr:.3g}: the student learns only what many similar queries agree on"]


@dataclass(kw_only=True)
class PknnPlan(Plan):
    """Private-kNN's labels (``accounting/pknn.PknnParams``' fields), alone or composed with a query generator."""

    card_keys: ClassVar[dict] = {k: k for k in ("sigma2", "k", "sampling_rate", "sigma1", "threshold", "queries_asked")}
    method: str = "pknn"
    k: int
    sampling_rate: float
    sigma1: float
    threshold: float
    sigma2: float
    num_classes: int
    queries_asked: int
    queries_answered: int

    def mechanism_rows(self) -> list[tuple[str, str]]:
        return [("k", str(self.k)), ("sampling rate γ", f"{self.sampling_rate:g}"), ("σ1 (screening)", f"{self.sigma1:g}"),
                ("threshold", f"{self.threshold:g}"), ("σ2 (argmax)", _sigma_text(self.sigma2, self.calibrated)),
                ("queries asked / answered", f"{self.queries_asked} / {self.queries_answered}")]


@dataclass(kw_only=True)
class DpsgdPlan(Plan):
    card_keys: ClassVar[dict] = {k: k for k in ("sigma", "steps", "sampling_rate", "clip", "count_sigma")}
    method: str = "dpsgd"
    sigma: float
    clip: float
    sampling_rate: float
    steps: int
    count_sigma: float

    def mechanism_rows(self) -> list[tuple[str, str]]:
        return [("noise multiplier σ", _sigma_text(self.sigma, self.calibrated)), ("clip C", f"{self.clip:g}"),
                ("sampling rate q (Poisson)", f"{self.sampling_rate:g}"), ("noisy steps T", str(self.steps)),
                ("σ of the noisy count", f"{self.count_sigma:g}")]


@dataclass(kw_only=True)
class AdlmPlan(Plan):
    card_keys: ClassVar[dict] = {"epsilon_relevance": "epsilon_relevance", "epsilon_coefficients": "epsilon_coefficients"}
    method: str = "adlm"
    epsilon_relevance: float  # ε₁: the relevance release's Laplace budget (scale 1/ε₁)
    epsilon_coefficients: float  # ε₂

    def mechanism_rows(self) -> list[tuple[str, str]]:
        return [("ε₁ relevance (Laplace, b = 1/ε₁)", f"{self.epsilon_relevance:.4g}"),
                ("ε₂ coefficients (Laplace, b = 1/ε₂)", f"{self.epsilon_coefficients:.4g}"), ("δ", "0 (pure ε-DP)")]
