"""The Adaptive Laplace Mechanism ("Adaptive Laplace Mechanism: Differential Privacy Preservation in Deep
Learning", Phan et al. 2017), corrected so that its ε is a proof: pure ε-DP (δ = 0), record-level, add/remove.

The paper's three parts are kept — a privately computed relevance (Laplace, ε₁), Laplace noise on the affine
layer's coefficients redistributed by relevance (ε₂), a polynomial loss whose coefficients carry the noise so the
budget does not grow with epochs — and ``mechanisms/adlm.py`` says exactly what runs. What was corrected, and why:

1. *Relevance from a model trained on the private data.* LRP relevances of a network trained on D depend on every
   record, so one record's relevance row is not its own; the 2d/|D| sensitivity does not hold (and uses |D|,
   itself private). Here the relevance comes from per-class sums of per-record L1-normalised fixed features
   (sensitivity 1, no |D|).
2. *Noise on the inputs of the first affine layer scaled by 1/|L|.* Each example's input would carry 1/|L| of
   the noise its own sensitivity needs, and the same noise is shared by a batch, so differences between
   examples are released exactly. Here the noise is on the released coefficients (the class sums), each with
   the full sensitivity of one record.
3. *Trainable hidden layers under an epoch-independent budget.* The Taylor coefficients of the output loss are
   sums over the examples' hidden activations, which change whenever the hidden weights change, so every
   epoch is a new release. Here the features before the trained layer are fixed (ScatterNet), and the loss is
   a degree-2 polynomial whose coefficients are released once. The second-order Taylor expansion of cross-entropy
   needs the d×d coefficient Σψψᵀ, whose Laplace noise swamped it on Fashion-MNIST (benchmarks/RESULTS.md); the
   squared distance to class prototypes has only the class sums as data-dependent coefficients.

The card's mechanism block lists these corrections; ``dpconvert audit`` recomputes ε from the two Laplace events.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from dpconvert.errors import DpconvertError
from dpconvert.accounting.plans import AdlmPlan
from dpconvert.option_fields import check_ranges, option

from .base import COVERS_STUDENT, NOT_COVERED, Claims, Method, MethodOutput, noise_probe, register

CORRECTIONS = [
    "relevance from per-class sums of per-record L1-normalised fixed features (sensitivity 1), not from LRP on a network trained on "
    "the private data (whose relevances depend on every record)",
    "Laplace noise on the released coefficients with one record's full sensitivity, not 1/|L| of it on each example's input",
    "fixed features before the one trained layer, so the loss coefficients are released once (with trainable hidden layers they "
    "change every step and the budget would grow with epochs)",
    "a squared-distance-to-prototype loss (exact degree-2 polynomial; coefficients: the class sums) instead of the second-order "
    "Taylor expansion of cross-entropy (its d×d coefficient drowned in Laplace noise)",
]
STUDENT_NAME = "scatternet_prototypes"


@dataclass
class AdlmOptions:
    PANEL: ClassVar[str] = "AdLM (record-level, pure ε-DP, private labels)"
    relevance_share: float = option(0.1, help="Share ε₁/ε of `eps` for the private relevance release; the rest (ε₂) buys the coefficients.",
                                    plan=True)
    # 0: uniform noise, the non-adaptive ablation; 1 measured no better (benchmarks)
    relevance_power: float = option(0.5, help="Noise redistribution: weight ∝ relevance^power (0 = uniform).")
    pool: int = option(3, help="ScatterNet coefficients pooled to pool×pool per channel (d = 81·pool² for one channel, J = 2).")
    minibatch: int = option(2048, help="Rows per forward pass of the fixed features (memory only).", cli=False)

    def __post_init__(self) -> None:
        checks = [(0 < self.relevance_share < 1, "relevance_share", "must be in (0, 1)"), (self.relevance_power >= 0, "relevance_power", "must be >= 0"),
                  (self.pool >= 1, "pool", "must be >= 1"), (self.minibatch >= 1, "minibatch", "must be >= 1")]
        check_ranges(checks)


@register
class AdaptiveLaplaceMethod(Method):
    name = "adlm"
    Options = AdlmOptions
    summary = "record-level Adaptive Laplace Mechanism (pure ε-DP, corrected)"
    listed_at = 30

    def check(self, run, opts: AdlmOptions, out=None) -> None:
        if not run.private_data:
            raise DpconvertError("AdLM trains on the private training data", fix="give `private_data` PATH (labelled)", param="private_data")
        if run.public_data:
            raise DpconvertError("AdLM learns from the private records' own labels and uses no queries", fix="drop `public_data`", param="public_data")
        if run.noise_multiplier is not None:
            raise DpconvertError("AdLM is pure ε-DP with Laplace noise calibrated to `eps`", fix="drop `noise_multiplier`", param="noise_multiplier")
        if run.student not in (None, STUDENT_NAME):
            raise DpconvertError(f"AdLM trains its own student ({STUDENT_NAME})", fix="drop `student`", param="student")

    def plan(self, run, opts: AdlmOptions, spec=None, queries=None) -> AdlmPlan:
        """Two Laplace releases at ε₁ = share·ε and ε₂ = ε − ε₁, scales b = 1/ε₁ and 1/ε₂ (L1 sensitivity 1 each)."""
        from dpconvert.accounting.adjacency import ADJACENCY_RECORD
        from dpconvert.accounting.plans import PlanProgress

        eps1, eps2 = opts.relevance_share * run.eps, (1 - opts.relevance_share) * run.eps
        return AdlmPlan(delta=0.0, target_epsilon=run.eps, calibrated=True, epsilon=run.eps, epsilon_relevance=eps1, epsilon_coefficients=eps2,
                        accountants={"laplace_composition": run.eps}, scope="record", adjacency=ADJACENCY_RECORD,
                        progress=PlanProgress("AdLM releases", 2))

    def run(self, ctx, opts: AdlmOptions, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        import torch

        from dpconvert.accounting import LaplaceAccountant
        from dpconvert.mechanisms.adlm import AdaptiveLaplace
        from dpconvert.students.scatternet import PrototypeStudent

        run = ctx.run  # the pipeline checked run and opts before loading anything (Method.check)
        spec = teacher.spec
        plan = self.plan(run, opts, spec)
        eps1, eps2 = plan.epsilon_relevance, plan.epsilon_coefficients
        if on_plan:
            on_plan(plan)
        torch.manual_seed(run.seed)
        student = PrototypeStudent(spec, pool=opts.pool).eval()
        accountant = LaplaceAccountant()
        mech = AdaptiveLaplace(eps_relevance=eps1, eps_coefficients=eps2, relevance_power=opts.relevance_power, accountant=accountant, noise=ctx.noise)
        mech.fit(ctx.private, student, spec.num_classes, opts.minibatch)
        if on_progress:
            on_progress({"kind": "steps", "done": 2, "step": 2, "steps": 2})
        return MethodOutput(
            student=student, student_name=STUDENT_NAME, probe=noise_probe(spec, run),
            rounds=[], warnings=list(ctx.noise.warnings), accountant=accountant, delta=0.0,
            claims=Claims(covers=COVERS_STUDENT, not_covered=NOT_COVERED, calibrated=True, target_epsilon=run.eps,
                          note="two Laplace releases of class sums of L1-normalised features (L1 sensitivity 1 each under add/remove), "
                               "sequential composition: ε = ε₁ + ε₂, δ = 0"),
            mechanism={"method": self.name, "epsilon_relevance": eps1, "epsilon_coefficients": eps2, "relevance_power": opts.relevance_power,
                       "features": f"ScatterNet (J={student.fixed_features.scatter.J}, L=8) pooled {opts.pool}×{opts.pool}, square root, "
                                   "per-record L1 normalisation (fixed, no privacy cost)",
                       "loss": "squared distance to class prototypes μ_k = noisy class sum / its row sum (closed form)",
                       "labels": "the private records' own labels", "teacher": "not queried (the student learns from the private labels)",
                       "corrections": CORRECTIONS, **ctx.noise.card_fields, "config": {**asdict(opts), "seed": run.seed}},
        )

