"""DP-SGD (Opacus) on the private records and their own labels: record-level, and the teacher is not queried.

Why not distil the teacher with DP-SGD: the teacher was trained on the same private data, so its answer about
*any* input may change when one record changes; per-example clipping bounds one example's gradient, not the
effect of one record on every teacher-made target. So the student learns from the private records' labels only,
and nothing here accepts teacher outputs, public queries or a query generator.

The default student is a ScatterNet with a linear head ("Differentially Private Learning Needs Better Features
(or Much More Data)", Tramèr & Boneh 2021): the scattering transform has no weights, is computed once per record
and costs no privacy, and DP-SGD trains the head on it — the best accuracy per ε on small images on a CPU
(benchmarks/RESULTS.md). Any other student is trained end to end (BatchNorm replaced by GroupNorm for Opacus).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import ClassVar, Optional

from dpconvert.errors import DpconvertError
from dpconvert.accounting.plans import DpsgdPlan
from dpconvert.option_fields import check_ranges, option

from .base import COVERS_STUDENT, NOT_COVERED, Claims, Method, MethodOutput, noise_probe, register

log = logging.getLogger("dpconvert")

# The ScatterNet student keeps every private record's fixed scattering coefficients in memory: above this many per record
# (Fashion-MNIST, 1×28×28: 3 969; 3×32×32: 15 552) the default student is trained end to end instead. A 3×64×64 teacher
# (62 208 per record, 15 GB for 60 000 records) was killed for memory on a 24 GB machine (benchmarks/RESULTS.md, table 13)
SCATTER_MAX_FEATURES = 16_384
TEACHER_NOT_USED = "not queried: DP-SGD learns from the private records' own labels (a teacher trained on them would leak through its answers)"


@dataclass
class DpsgdOptions:
    # Defaults from the Fashion-MNIST benchmark (benchmarks/RESULTS.md) following Tramèr & Boneh's ScatterNet recipe:
    # large lots (q·n ≈ 8 400 of 60 000), small clip, SGD with momentum, many epochs at the correspondingly larger σ.
    PANEL: ClassVar[str] = "DP-SGD (record-level, private labels)"
    epochs: int = option(40, help="Epochs of ⌊1/q⌋ noisy steps each (the steps are a function of the options only: n never sets them).",
                         plan=True)
    sampling_rate: float = option(0.14, help="Lot sampling rate q: each record joins each lot independently with this probability.", plan=True)
    clip: float = option(0.1, help="Per-example gradient norm bound C.", plan=True)
    lr: float = option(4.0, help="Learning rate of SGD on the noisy gradients.")
    momentum: float = option(0.9, help="SGD momentum.")
    sigma: Optional[float] = option(None, help="Noise multiplier σ (the same as `noise_multiplier`: give one); ε is computed and must not "
                                    "exceed `eps`.", default_text="calibrated to `eps`", plan=True)
    count_sigma: float = option(100.0, help="Noise std of the record count that scales the learning rate (sensitivity 1; counted in ε).",
                                plan=True)
    minibatch: int = option(2048, help="Rows per forward pass when computing fixed features (memory only; no effect on the result).", cli=False)

    def __post_init__(self) -> None:
        checks = [
            (self.epochs >= 1, "epochs", "must be >= 1"), (0 < self.sampling_rate < 1, "sampling_rate", "(q) must be in (0, 1)"),
            (self.clip > 0, "clip", "must be > 0"), (self.lr > 0, "lr", "must be > 0"), (0 <= self.momentum < 1, "momentum", "must be in [0, 1)"),
            (self.sigma is None or self.sigma > 0, "sigma", "must be > 0"), (self.count_sigma > 0, "count_sigma", "must be > 0"),
            (self.minibatch >= 1, "minibatch", "must be >= 1"),
        ]
        check_ranges(checks)

    @property
    def steps(self) -> int:
        return self.epochs * int(1 / self.sampling_rate)


def default_student(spec, device: str = "cpu") -> str:
    from dpconvert.students import default_student_name

    from dpconvert.students.scatternet import fixed_feature_count, reduction_factor

    if fixed_feature_count(spec) <= SCATTER_MAX_FEATURES:
        return "scatternet_linear"
    if fixed_feature_count(spec, reduction_factor(spec)) <= SCATTER_MAX_FEATURES:  # a large input, scattered at ≤ 32 px
        return "reduced_scatternet_linear"
    return default_student_name(spec, device)


@register
class DpSgdMethod(Method):
    takes_noise_multiplier = True
    name = "dpsgd"
    Options = DpsgdOptions
    summary = "record-level DP-SGD (Opacus) on the private labels"
    listed_at = 20

    def auto_reason(self, run) -> Optional[str]:
        """Private data (with or without public queries): DP-SGD, the best measured method (Fashion-MNIST, record-level
        ε = 1: 88.6 % against Private-kNN's 82.2 % on the same private data plus 5 000 public queries; benchmarks/RESULTS.md),
        so bringing public images never lowers accuracy; `method` pknn uses them."""
        if run.private_data and run.public_data:
            return ("private data given: record-level DP-SGD on the private labels, the best measured method (Fashion-MNIST, "
                    "ε = 1: 88.6 % against 82.2 % for Private-kNN labelling the public queries); the public queries are not "
                    "used: `method` pknn uses them")
        if run.private_data:
            return ("private data given, no public queries: record-level DP-SGD on the private labels (the best measured method, "
                    "88 % vs Private-kNN's 82 % on Fashion-MNIST at ε = 1)")
        return None

    def check(self, run, opts: DpsgdOptions, out=None) -> None:
        if not run.private_data:
            raise DpconvertError("DP-SGD trains on the private training data", fix="give `private_data` PATH (labelled)", param="private_data")
        if run.public_data and run.method != "auto":  # auto says in its reason that the public queries go unused
            raise DpconvertError("DP-SGD learns from the private records' own labels and uses no queries",
                                 fix="drop `public_data` (or use `method` pknn, which labels public queries)", param="public_data")
        if run.noise_multiplier is not None and opts.sigma is not None:
            raise DpconvertError("`noise_multiplier` and `sigma` both set DP-SGD's noise multiplier", fix="give one", param="noise_multiplier")

    def plan(self, run, opts: DpsgdOptions, spec=None, queries: Optional[int] = None) -> DpsgdPlan:
        from dpconvert.accounting.planning import plan_dpsgd

        sigma = opts.sigma if opts.sigma is not None else run.noise_multiplier  # one name for the noise level: noise_multiplier
        plan = plan_dpsgd(eps=run.eps, delta=run.delta, sampling_rate=opts.sampling_rate, steps=opts.steps, clip=opts.clip,
                          sigma=sigma, count_sigma=opts.count_sigma)
        if opts.sigma is not None and plan.epsilon > run.eps * (1 + 1e-9):
            raise DpconvertError(f"`sigma` {opts.sigma} gives ε={plan.epsilon:.3f} > `eps` {run.eps:g}", fix="raise `sigma` or lower `epochs`", param="sigma")
        return plan

    def run(self, ctx, opts: DpsgdOptions, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        import torch

        from dpconvert.accounting import DpsgdAccountant
        from dpconvert.mechanisms.dp_sgd import DpSgd, train_on_private

        run = ctx.run  # the pipeline checked run and opts before loading anything (Method.check)
        spec = teacher.spec
        plan = self.plan(run, opts)  # before any private record is read
        if on_plan:
            on_plan(plan)

        def named(name: str, total: int = 1, unit: str = "") -> None:  # a phase for the progress display (no record counts)
            if on_progress:
                on_progress({"kind": "phase", "name": name, "total": total, "unit": unit})

        torch.manual_seed(run.seed)
        student_name = run.student or default_student(spec, run.device)
        accountant = DpsgdAccountant()

        def make_sgd(trainable):  # lots and noise from the run's noise stream (mechanisms/noise.py)
            return DpSgd(trainable, sigma=plan.sigma, clip=opts.clip, sampling_rate=opts.sampling_rate, steps=opts.steps,
                         count_sigma=opts.count_sigma, lr=opts.lr, momentum=opts.momentum, accountant=accountant, noise=ctx.noise)

        every = max(1, opts.steps // 100)
        on_step = (lambda s: s % every == 0 and on_progress({"kind": "steps", "done": every, "step": s, "steps": opts.steps})) if on_progress else None
        on_estimate = (lambda s: on_progress({"kind": "estimate", "steps_seconds": s})) if on_progress else None
        student, part, engine = train_on_private(ctx.private, student_name, spec, minibatch=opts.minibatch, make_sgd=make_sgd, named=named,
                                                 on_step=on_step, on_estimate=on_estimate)
        return MethodOutput(
            student=student.eval(), student_name=student_name, probe=noise_probe(spec, run),
            rounds=[], warnings=list(ctx.noise.warnings), accountant=accountant, delta=run.delta,
            claims=Claims(covers=COVERS_STUDENT, not_covered=NOT_COVERED, calibrated=plan.calibrated, target_epsilon=run.eps,
                          note="Poisson-subsampled Gaussian steps (sensitivity C under add/remove) and one Gaussian count (sensitivity 1), "
                               "composed by dp_accounting's PLD accountant (reported) and RDP accountant"),
            mechanism={"method": self.name, "sigma": plan.sigma, "clip": opts.clip, "sampling_rate": opts.sampling_rate,
                       "steps": accountant.count("subsampled_gaussian"), "count_sigma": opts.count_sigma,
                       "sampling": "Poisson (each record joins each lot independently with probability q)",
                       "engine": f"{engine}; Poisson lots by opacus UniformWithReplacementSampler",
                       "trained": part, "labels": "the private records' own labels", "teacher": TEACHER_NOT_USED,
                       "learning_rate_scale": "lr / (q·ñ), ñ the noisy record count", **ctx.noise.card_fields, "config": {**asdict(opts), "seed": run.seed}},
        )
