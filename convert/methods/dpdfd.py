"""DPDFD, data-free distillation with noisy releases ("Differentially Private Data-Free Distillation", Algorithm 1).

Query-level DP: synthetic (or public) inputs, teacher answers turned into per-row normalised output gradients with
Gaussian noise (``mechanisms/gaussian_release.py``), the student trained on those releases only
(``mechanisms/dpdfd.py``). This module holds the method's options and defaults, the privacy plan, and the card blocks.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from dpconvert.errors import DpconvertError

from dpconvert.accounting.statements import NO_NOISE_WARNING, NOT_COVERED_PUBLIC_IMAGES

from .base import COVERS_STUDENT, NOT_COVERED, Method, MethodOutput, card_number, register

log = logging.getLogger("dpconvert")

DEFAULT_DISTILL_LOSS = "logits"  # chosen by benchmark (benchmarks/RESULTS.md)
RELEASE_ROWS_DEFAULT = 2048  # the student's minibatch over released rows (small inputs)
LARGE_INPUT_MINIBATCH = 64  # … and above 3×32×32: an ImageNet-sized student's activations for 2 048 rows would not fit
PUBLIC_TARGETS = {"rows": "rows", "per-image": "sources"}  # `public_targets` → the engine's student_data
PER_IMAGE_BATCH = 1_000_000  # per-image targets: rows per release by default (200 per image for 5 000 public images)
PRIOR_IMAGES_SEED_OFFSET = 3000  # the fixed prior images come from seed + this (not the query stream)
# data-free default for 28×28-sized inputs (256 < C·H·W ≤ 1024): views of 2 500 fixed prior images, targets averaged per
# image. Fashion-MNIST CNN teacher, ε = 1: 66.0 / 66.1 / 66.2 % on seeds 0–2 against 56.5 % for one target per prior
# sample (benchmarks/RESULTS.md, table 2); not measured on other sizes, where the default stays one target per sample
DEFAULT_PRIOR_IMAGES = 2500


@dataclass
class DpdfdOptions:
    releases: int = 1  # T: noisy releases (ε depends on σ and T only)
    batch_size: Optional[int] = None  # B: rows per release (free for the query-level ε); default from the input size
    clip: float = 1.0  # C: row norm of the normalised output gradients
    epochs: Optional[int] = None  # student passes over the released pairs after each release; default from the input size
    distill_loss: str = DEFAULT_DISTILL_LOSS  # L_T: logits (centred logit matching), ce (the paper's), kd
    generator: Optional[str] = None  # a learned generator mixed with the prior (e.g. dafl)
    prior: Optional[str] = None  # the data-free query prior (generators.PRIORS); default from the input size
    prior_pool: int = 10  # later releases pick a class-balanced selection out of pool × B prior samples
    # with public_data: "per-image" (the targets of all views of one image are averaged and denoised) or "rows" (every view
    # of a public image is a training pair with its own noisy target). per-image is the default: at ε = 1 it measured
    # better on in-domain and on out-of-domain images, 85.0 vs 80.2 % and 48.7 vs 42.8 %; rows keeps more without noise
    # (σ = 0, out of domain: 72.1 vs 55.6 %) — benchmarks/RESULTS.md, table 3
    public_targets: Optional[str] = None  # None: per-image with public_data or prior_images (and no generator), else rows
    # data-free per-image targets: draw this many fixed images from the prior (from the seed) and query views of each one
    # many times, so their released targets can be averaged like public images'; None/0: one target per prior sample
    # (rows). None: DEFAULT_PRIOR_IMAGES for 28×28-sized inputs when nothing else is the query source, else 0
    prior_images: Optional[int] = None
    amp: Optional[str] = None  # bf16 or off; None: the device's default (DEVICE_DEFAULTS: bf16 on CUDA, off on CPU)
    save_generator: Optional[str] = None  # FILE.safetensors: the learned generator and what it cost
    # per-answer: no input is answered twice over the run (the engine enforces it across releases), so the query-level ε
    # is one release's for any number of releases (docs/privacy.md); composed: the T releases compose (the bound for
    # runs whose cost is reused elsewhere, e.g. Private-kNN's query generator)
    accounting: str = "per-answer"
    engine: dict = field(default_factory=dict)  # research: any other DpdfdConfig field (checked against it)

    def __post_init__(self) -> None:
        if self.releases < 1:
            raise DpconvertError("`releases` must be >= 1")
        if self.batch_size is not None and self.batch_size < 1:
            raise DpconvertError("`batch_size` must be >= 1")
        if not self.clip > 0:
            raise DpconvertError("`clip` must be > 0")
        if self.epochs is not None and self.epochs < 1:
            raise DpconvertError("`epochs` must be >= 1")
        if self.prior_pool < 1:
            raise DpconvertError("`prior_pool` must be >= 1")
        if self.amp is not None and self.amp not in AMP:
            raise DpconvertError(f"`amp` must be bf16 or off, got {self.amp!r}")
        if self.prior_images is not None and self.prior_images < 0:
            raise DpconvertError("`prior_images` must be >= 0")
        if self.accounting not in ACCOUNTING:
            raise DpconvertError(f"unknown `accounting` {self.accounting!r}; choose one of: {', '.join(ACCOUNTING)}")
        if self.public_targets is not None and self.public_targets not in PUBLIC_TARGETS:
            raise DpconvertError(f"unknown `public_targets` {self.public_targets!r}; choose one of: {', '.join(PUBLIC_TARGETS)}")


@dataclass(frozen=True)
class DeviceDefaults:
    """What DPDFD picks for what the user left out, by the kind of device the run is on (the card records it)."""

    batch_sizes: tuple  # rows per release for inputs of ≤ 256, ≤ 1 024 and more values
    large_input_epochs: int  # student epochs above 3×32×32 (an ImageNet-sized student costs ~1 000× a small CNN per row)
    amp: Optional[str]  # "bf16": teacher and student forward under bf16 autocast (normalisation and noise stay fp32)


DEVICE_DEFAULTS = {
    # sized so a conversion fits a few minutes on 2 CPU cores (benchmarks/RESULTS.md); at 3×224×224 a resnet18 student
    # trains at ~16 rows/s there, so 2 epochs over 32 768 rows already take ~70 min (the run says so up front)
    "cpu": DeviceDefaults((300_000, 100_000, 32_768), 2, None),
    # a GPU answers ~20× the rows in the time: Fashion-MNIST on an H200, B = 2M gave 63.1 % in 85 s against 51.8 % at
    # B = 100k in 13 s (fp32); bf16 autocast is the usual inference/training precision on recent GPUs
    "cuda": DeviceDefaults((2_000_000, 2_000_000, 262_144), 8, "bf16"),
}
AMP = ("bf16", "off")
ACCOUNTING = {"per-answer": "dpdfd_per_answer", "composed": "dpdfd"}  # `accounting` → the accountant


def prior_images(run, opts: DpdfdOptions, spec) -> int:
    """Fixed prior images whose views are queried (data-free per-image targets); 0 for one target per prior sample."""
    if opts.prior_images is not None:
        return opts.prior_images
    other_source = run.public_data or opts.generator or opts.public_targets == "rows"
    return DEFAULT_PRIOR_IMAGES if not other_source and 256 < spec.channels * spec.height * spec.width <= 1024 else 0


def public_targets(run, opts: DpdfdOptions, spec) -> str:
    """What the student learns from: as given, else per-image for public images or fixed prior images without a
    generator, else rows."""
    if opts.public_targets is not None:
        return opts.public_targets
    return "per-image" if not opts.generator and (run.public_data or prior_images(run, opts, spec)) else "rows"


def draw_prior_images(run, opts: DpdfdOptions, spec, n: int):
    """n images drawn once from the data-free prior, from the seed (not the query stream): nobody's data."""
    import torch

    from dpconvert.generators import create_generator, default_prior_name

    base = create_generator(opts.prior or default_prior_name(spec), spec)
    z = torch.randn(n, base.nz, generator=torch.Generator().manual_seed(run.seed + PRIOR_IMAGES_SEED_OFFSET))
    with torch.no_grad():
        return torch.cat([base(c) for c in z.split(4096)])


def fixed_prior_images(run, opts: DpdfdOptions, spec, n: int):
    """(query source, card description): :func:`draw_prior_images`, queried as views under sub-pixel shifts and flips
    like public images, so each image's released targets can be averaged. Nothing of any data set is involved; the
    per-image ε does not apply (the images are not anyone's data)."""
    from dpconvert.generators import PRIORS, default_prior_name
    from dpconvert.generators.public_images import PublicImageSource

    name = opts.prior or default_prior_name(spec)
    images = draw_prior_images(run, opts, spec, n)
    return (PublicImageSource(images, mix_prob=0.0, public=False),
            f"{PRIORS[name]}: {n} fixed images drawn from it (seed {run.seed}), views under sub-pixel shifts and flips; the "
            "released targets averaged per image and denoised — data-free")


def device_kind(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def default_batch_size(spec, device: str = "cpu") -> int:
    """Rows per release: ε does not depend on it; the student's signal-to-noise grows with √B."""
    pixels = spec.channels * spec.height * spec.width
    sizes = DEVICE_DEFAULTS[device_kind(device)].batch_sizes
    return sizes[0] if pixels <= 256 else sizes[1] if pixels <= 1024 else sizes[2]


def default_epochs(spec, device: str = "cpu") -> int:
    """Student passes over the released pairs: 8 on 28×28 beat 4 with the cosine schedule; on 8×8 digits 5 epochs at
    a higher learning rate match the former 6 in two thirds of the time (benchmarks/RESULTS.md, table 1)."""
    if spec.channels * spec.height * spec.width > 3 * 32 * 32:
        return DEVICE_DEFAULTS[device_kind(device)].large_input_epochs
    return 5 if _small(spec) else 8


def default_student_lr(spec) -> float:
    """Peak of the cosine schedule. The student's accuracy on 8×8 digits follows the optimiser steps it gets: 4e-3
    reaches with 5 epochs what 2e-3 reached with 6 (94.7 / 95.5 / 93.4 % vs 93.4 % on all 1 797 digits)."""
    return 4e-3 if _small(spec) else 2e-3


def default_minibatch(spec) -> int:
    return RELEASE_ROWS_DEFAULT if spec.channels * spec.height * spec.width <= 3 * 32 * 32 else LARGE_INPUT_MINIBATCH


def _small(spec) -> bool:
    return spec.channels * spec.height * spec.width <= 256


def check_prior_name(name: str) -> str:
    from dpconvert.generators import PRIORS

    if name not in PRIORS:
        raise DpconvertError(f"unknown `prior` {name!r}; choose one of: {', '.join(PRIORS)}")
    return name


def check_generator_path(path: str, out: Optional[Path], has_generator: bool, force: bool = False) -> None:
    from dpconvert.io.atomic import check_output

    p = Path(path)
    if not has_generator:
        raise DpconvertError("`save_generator` needs a learned generator: add `generator` dafl (the default prior is data-independent; "
                             "Private-kNN can use it directly with `query_generator` prior)")
    if p.suffix != ".safetensors":
        raise DpconvertError(f"`save_generator` must end in .safetensors, got {p.name!r}")
    if out is not None and p.resolve() == Path(out).resolve():
        raise DpconvertError("`save_generator` and the output model must be different files")
    check_output(p, param="save_generator", force=force)


def distinct_answers_warning(delta: float, answers: int) -> Optional[str]:
    """δ is the chance the guarantee fails outright; with more protected answers than 1/δ it is weak."""
    if delta * answers <= 1:
        return None
    return (f"δ={delta:g} is larger than 1/(B·T) = 1/{answers} for the {answers} protected teacher answers; "
            f"use `delta` {10.0 ** -math.ceil(math.log10(answers)):g} or smaller")


@register
class Dpdfd(Method):
    name = "dpdfd"
    Options = DpdfdOptions
    summary = "data-free DPDFD (query-level)"
    distributed = True

    def check(self, run, opts: DpdfdOptions, out: Optional[Path] = None) -> None:
        if run.public_data and opts.prior:
            raise DpconvertError("`prior` picks the data-free query prior and `public_data` replaces it: drop one of them")
        if opts.public_targets == "per-image" and not (run.public_data or opts.prior_images):
            raise DpconvertError(f"`public_targets` {opts.public_targets} averages the answers about each image: it needs `public_data` "
                                 "or `prior_images` N")
        if opts.prior_images and (opts.generator or opts.public_targets == "rows"):
            raise DpconvertError("`prior_images` averages the targets of fixed prior images: drop `generator` and `public_targets` rows, "
                                 "or `prior_images`")
        if opts.public_targets == "per-image" and opts.generator:
            raise DpconvertError(f"`public_targets` {opts.public_targets} and `generator` are alternatives: drop one of them")
        if opts.prior:
            check_prior_name(opts.prior)
        if opts.save_generator:
            check_generator_path(opts.save_generator, out, opts.generator is not None, run.force)
        from dpconvert.mechanisms.dpdfd import DISTILL_LOSSES, DpdfdConfig

        DISTILL_LOSSES.get(opts.engine.get("distill_loss", opts.distill_loss))  # one-line error naming the choices
        unknown = sorted(set(opts.engine) - set(DpdfdConfig.__dataclass_fields__))
        if unknown:
            raise DpconvertError(f"unknown DPDFD engine setting {unknown[0]!r}")

    def plan(self, run, opts: DpdfdOptions, spec) -> dict:
        from dpconvert.accounting.planning import plan_dpdfd
        from dpconvert.options import units_delta

        per_image = public_targets(run, opts, spec) == "per-image"
        device_b = default_batch_size(spec, run.device)
        batch_size = opts.batch_size or (max(PER_IMAGE_BATCH, device_b) if per_image else device_b)
        delta = units_delta(batch_size * opts.releases) if run.delta_is_default else run.delta  # δ ≤ 1/(B·T) by default
        plan = plan_dpdfd(eps=run.eps, delta=delta, steps=opts.releases, batch_size=batch_size, noise_multiplier=run.noise_multiplier,
                          per_answer=opts.accounting == "per-answer")
        plan["student_epochs"] = opts.epochs or default_epochs(spec, run.device)
        return plan

    def run(self, run, opts: DpdfdOptions, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        import torch

        from dpconvert.accounting import ACCOUNTANTS
        from dpconvert.distributed import current_world
        from dpconvert.mechanisms.dpdfd import Dpdfd as Engine
        from dpconvert.mechanisms.noise import SEEDED_WARNING, mechanism_rng
        from dpconvert.mechanisms.teacher_checks import PROBE_SIZE, check_teacher

        self.check(run, opts)
        spec = teacher.spec
        plan = self.plan(run, opts, spec)
        run = dataclasses.replace(run, delta=plan["delta"])  # the δ the plan resolved is the one every bound uses
        warnings = self._warnings(run, plan)
        if on_plan:
            on_plan(plan)
        torch.manual_seed(run.seed)
        student, student_name, prior, source, generator = self._models(run, opts, spec)
        cfg = self._engine_config(run, opts, plan, generator, spec, prior)
        accountant = ACCOUNTANTS.get(ACCOUNTING[opts.accounting])()
        noise_rng, noise_info = mechanism_rng(cfg.seed, seeded=run.seeded_noise)
        if run.seeded_noise:
            warnings.append(SEEDED_WARNING)
        job = Engine(teacher, student, generator, cfg, accountant, device=run.device, prior=prior, noise_rng=noise_rng,
                     world=current_world(), replicated_noise=run.seeded_noise)
        check_teacher(teacher, job.probe_inputs(PROBE_SIZE))  # row independence and finite answers, before any release
        if on_progress:
            on_progress(job.estimate())  # how long this will take, before the long part
            job.attach_holdout()
        rounds: list = []
        job.run(rounds.append, on_progress=_with_epsilon(on_progress, accountant, run.delta))
        if job.mechanism.zeroed_rows:  # console only: how many answers were non-finite depends on the teacher
            log.warning("note (console only): %d teacher answers were not finite and were released as zero rows (pure noise)",
                        job.mechanism.zeroed_rows)
        self._check_spent(accountant, plan, run, opts)
        mechanism = self._mechanism_block(run, opts, plan, cfg, noise_info, source, generator)
        guarantee = self._guarantee(run, plan)
        images = job.public_image_counts()
        if images is not None:  # public queries: how much one source image weighs, and the ε for all of its answers
            mechanism["public_images"] = images
            guarantee["per_image_epsilon"] = card_number(accountant.per_image_epsilon(delta=run.delta, max_rows=images["max_rows_per_image"]))
        extra = {}
        if opts.save_generator:
            from dpconvert.generators.saved import generator_bytes

            cost = generator_cost(accountant, teacher, run.delta, mechanism)
            extra[opts.save_generator] = generator_bytes(generator, opts.generator, spec, cost)
        return MethodOutput(
            student=student, student_name=student_name, probe=job.synthesise(run.parity_inputs), rounds=rounds, warnings=warnings,
            extra_files=extra, generator=generator, mechanism=mechanism, guarantee=guarantee,
            accounting=self._accounting(run, plan, accountant))

    # ------------------------------------------------------------ pieces of run
    def _warnings(self, run, plan) -> list:
        warnings = []
        if plan["sigma"] == 0:
            warnings.append(NO_NOISE_WARNING)
        w = distinct_answers_warning(run.delta, plan["batch_size"] * plan["steps"])
        if w:
            warnings.append(w)
        return warnings

    def _models(self, run, opts: DpdfdOptions, spec):
        """(student, its name, query prior, query-source description, learned generator or None)."""
        from dpconvert.generators import PRIORS, create_generator, default_prior_name
        from dpconvert.students import create_student, default_student_name

        student_name = run.student or default_student_name(spec)
        student = create_student(student_name, spec)
        if run.public_data:  # explicit, labelled option: queries from public images instead of the random-field prior
            import torch

            from dpconvert.generators.public_images import PublicImageSource
            from dpconvert.io.data import load_data

            public = load_data(run.public_data, spec, **run.data_format())
            if len(public) == 0:
                raise DpconvertError(f"{run.public_data}: the public set is empty; give public images or drop `public_data`")
            extra = opts.prior_images or 0  # a mixture with fixed prior images (given explicitly: public data turns the default off)
            if public_targets(run, opts, spec) == "per-image":  # every view shows one image, so its rows can be averaged
                images = public.x if not extra else torch.cat([public.x, draw_prior_images(run, opts, spec, extra)])
                prior = PublicImageSource(images, mix_prob=0.0, public_count=len(public))
                how = "views under sub-pixel shifts and flips; the released targets averaged per image and denoised"
                if extra:
                    how += f"; mixed with {extra} fixed images of the data-free prior (seed {run.seed})"
            else:
                prior = PublicImageSource(public.x)
                how = "views under sub-pixel shifts, flips and mixup; one noisy target per view"
            source = f"public images {run.public_data} ({len(public)}, unlabelled; {how}) — not data-free"
        elif n_prior := prior_images(run, opts, spec):
            prior, source = fixed_prior_images(run, opts, spec, n_prior)
        else:
            name = opts.prior or default_prior_name(spec)
            prior, source = create_generator(name, spec), PRIORS[name]
        generator = create_generator(opts.generator, spec) if opts.generator else None
        return student, student_name, prior, source, generator

    def _engine_config(self, run, opts: DpdfdOptions, plan: dict, generator, teacher_spec, prior):
        from dpconvert.mechanisms.dpdfd import DpdfdConfig

        settings = dict(releases=opts.releases, batch_size=plan["batch_size"], sigma=plan["sigma"], clip=opts.clip,
                        prior_pool=opts.prior_pool, student_epochs=plan["student_epochs"], seed=run.seed,
                        distill_loss=opts.distill_loss, prior_fraction=1.0 if generator is None else 0.5,
                        minibatch=default_minibatch(teacher_spec), student_lr=default_student_lr(teacher_spec), lr_schedule="cosine", logit_adjust=True,
                        student_data=PUBLIC_TARGETS[public_targets(run, opts, teacher_spec)],
                        amp=DEVICE_DEFAULTS[device_kind(run.device)].amp if opts.amp is None else (None if opts.amp == "off" else opts.amp))
        if settings["student_data"] == "sources" and opts.epochs:  # per-image targets: epochs over the queried images
            settings["student_samples"] = opts.epochs * prior.num_bases
        return DpdfdConfig(**{**settings, **opts.engine})

    def _check_spent(self, accountant, plan: dict, run, opts: DpdfdOptions) -> float:
        """The accountant, fed by the mechanism that drew the noise, must agree with the plan."""
        eps_spent = accountant.epsilon(delta=run.delta)
        if accountant.count("normalised_gaussian_release") != opts.releases or not math.isclose(eps_spent, plan["epsilon"], rel_tol=1e-9, abs_tol=1e-12):
            raise DpconvertError(f"internal error: the mechanism spent ε={eps_spent} but the plan said ε={plan['epsilon']}; nothing was written")
        if run.eps is not None and eps_spent > run.eps:
            raise DpconvertError(f"internal error: ε spent {eps_spent} exceeds the target {run.eps}; nothing was written")
        return eps_spent

    def _guarantee(self, run, plan: dict) -> dict:
        return {
            "epsilon": card_number(plan["epsilon"]), "delta": run.delta, "scope": "query", "adjacency": plan["adjacency"],
            "record_level_epsilon": card_number(plan["record_level_epsilon"]), "replace_one_epsilon": card_number(plan["replace_one_epsilon"]),
            "covers": list(COVERS_STUDENT),
            "not_covered": NOT_COVERED + ([NOT_COVERED_PUBLIC_IMAGES] if run.public_data else []),
        }

    def _accounting(self, run, plan: dict, accountant) -> dict:
        from dpconvert.accounting import library_versions

        return {
            "accountant": accountant.name,
            "epsilons": {k: card_number(v) for k, v in accountant.epsilons(delta=run.delta).items() if k != "epsilon"},
            "cross_check": {k: card_number(v) for k, v in (accountant.cross_check(delta=run.delta) if plan["sigma"] > 0 else {}).items()},
            "libraries": library_versions(),
            "calibrated": plan["calibrated"],
            "target_epsilon": run.eps if plan["calibrated"] else None,
            "state": accountant.state_dict(),
        }

    def _mechanism_block(self, run, opts: DpdfdOptions, plan: dict, cfg, noise_info: dict, source: str, generator) -> dict:
        return {
            "method": "dpdfd",
            "sigma": plan["sigma"], "clip": opts.clip, "batch_size": plan["batch_size"], "releases": opts.releases,
            "distill_loss": cfg.distill_loss, **noise_info,
            "distinct_inputs": True,  # Dpdfd.distinct_queries: no input twice in a release (the auditor checks for it)
            "distinct_across_releases": True,  # … nor twice in the run: every release skips the inputs answered before
            "max_answers_per_input": 1,
            "query_source": source + (f" + {opts.generator} generator" if generator is not None else "")
                            + (f", student-guided selection from a pool ×{cfg.prior_pool}" if cfg.prior_pool > 1 and opts.releases > 1 else ""),
            "config": cfg.to_dict(),
            "device_defaults": {"device": device_kind(run.device), "batch_size": opts.batch_size is None, "epochs": opts.epochs is None,
                                "amp": opts.amp is None},  # which settings came from DEVICE_DEFAULTS for this device
        }


def _with_epsilon(on_progress, accountant, delta: float):
    """A phase's start carries the ε spent so far, computed here (the CLI only prints it); advances pass as they are
    (they come every minibatch)."""
    if on_progress is None:
        return None
    return lambda info: on_progress({**info, "epsilon": accountant.epsilon(delta=delta)} if info["kind"] == "phase" else info)


def generator_cost(accountant, teacher, delta: float, mechanism: dict):
    """What a DPDFD-trained generator cost: the run's events, its teacher, and the mechanism facts its ε rests on. The
    events are recorded for the composed accountant (a valid bound for any run; a card that reuses the generator
    composes its cost with other mechanisms' events), so the ε recorded is the composed one."""
    from dpconvert.accounting import DpdfdAccountant
    from dpconvert.generators.saved import COST_MECHANISM_KEYS, GeneratorCost

    composed = DpdfdAccountant(events=list(accountant.events))
    return GeneratorCost(composed.state_dict(), "query", teacher.sha256, composed.epsilon(delta=delta), delta,
                         {k: mechanism[k] for k in COST_MECHANISM_KEYS})


