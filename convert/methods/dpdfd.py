"""DPDFD, data-free distillation with noisy releases ("Differentially Private Data-Free Distillation", Algorithm 1).

Query-level DP: synthetic (or public) inputs, teacher answers turned into per-row normalised output gradients with
Gaussian noise (``mechanisms/gaussian_release.py``), the student trained on those releases only
(``mechanisms/dpdfd.py``). This module holds the privacy plan, the run and the card blocks; the options and the
defaults picked for what the user left out are in ``dpdfd_options.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Optional

from dpconvert.errors import DpconvertError

from dpconvert.accounting.statements import NO_NOISE_WARNING, NOT_COVERED_PUBLIC_IMAGES

from .dpdfd_options import (
    PUBLIC_TARGETS, PER_IMAGE_BATCH, DpdfdOptions, DEVICE_DEFAULTS, ACCOUNTING, prior_images, public_targets,
    draw_prior_images, fixed_prior_images, device_kind, default_batch_size, default_epochs, default_student_lr,
    default_minibatch, check_prior_name, check_generator_path, distinct_answers_warning,
)
from .base import COVERS_STUDENT, NOT_COVERED, Claims, Method, MethodOutput, register

log = logging.getLogger("dpconvert")


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

    def plan(self, run, opts: DpdfdOptions, spec, queries: Optional[int] = None) -> dict:
        from dpconvert.accounting.planning import plan_dpdfd
        from dpconvert.options import DEFAULT_DELTA, units_delta

        per_image = public_targets(run, opts, spec) == "per-image"
        device_b = default_batch_size(spec, run.device)
        batch_size = opts.batch_size or (max(PER_IMAGE_BATCH, device_b) if per_image else device_b)
        delta = units_delta(batch_size * opts.releases) if run.delta_is_default else run.delta  # δ ≤ 1/(B·T) by default
        if opts.disjoint_partitions and run.delta_is_default:  # record-level: δ also within the other methods' default for records
            delta = min(delta, DEFAULT_DELTA)
        plan = plan_dpdfd(eps=run.eps, delta=delta, steps=opts.releases, batch_size=batch_size, noise_multiplier=run.noise_multiplier,
                          per_answer=opts.accounting == "per-answer", disjoint_teachers=opts.disjoint_partitions or 0)
        plan["student_epochs"] = opts.epochs or default_epochs(spec, run.device)
        return plan

    def run(self, ctx, opts: DpdfdOptions, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        import torch

        from dpconvert.accounting import ACCOUNTANTS
        from dpconvert.mechanisms.dpdfd import Dpdfd as Engine
        from dpconvert.mechanisms.teacher_checks import PROBE_SIZE, check_teacher

        run = ctx.run
        self.check(run, opts)
        teachers = len(getattr(teacher, "members", None) or [teacher])
        if opts.disjoint_partitions is not None and opts.disjoint_partitions != teachers:
            raise DpconvertError(f"`disjoint_partitions` says {opts.disjoint_partitions} teachers on disjoint partitions but {teachers} "
                                 f"{'was' if teachers == 1 else 'were'} given; give all {opts.disjoint_partitions} teacher files (or their folder)"
                                 + (f", or set `disjoint_partitions` {teachers}" if teachers > 1 else ""))
        spec = teacher.spec
        plan = self.plan(run, opts, spec)
        run = dataclasses.replace(run, delta=plan["delta"])  # the δ the plan resolved is the one every bound uses
        warnings = self._warnings(run, plan)
        if on_plan:
            on_plan(plan)
        torch.manual_seed(run.seed)
        student, student_name, prior, source, generator = self._models(run, opts, spec)
        cfg = self._engine_config(run, opts, plan, generator, spec, prior)
        accountant = ACCOUNTANTS.get("dpdfd_disjoint_teachers" if opts.disjoint_partitions else ACCOUNTING[opts.accounting])()
        warnings += ctx.noise.warnings
        job = Engine(teacher, student, generator, cfg, accountant, device=run.device, prior=prior, noise=ctx.noise, world=ctx.world)
        check_teacher(teacher, job.probe_inputs(PROBE_SIZE))  # row independence and finite answers, before any release
        if on_progress:
            on_progress(job.estimate())  # how long this will take, before the long part
            job.attach_holdout()
        rounds: list = []
        job.run(rounds.append, on_progress=_with_epsilon(on_progress, accountant, run.delta))
        if job.mechanism.zeroed_rows:  # console only: how many answers were non-finite depends on the teacher
            log.warning("note (console only): %d teacher answers were not finite and were released as zero rows (pure noise)",
                        job.mechanism.zeroed_rows)
        ran_the_plan = accountant.count("normalised_gaussian_release") == opts.releases and math.isclose(
            accountant.epsilon(delta=run.delta), plan["epsilon"], rel_tol=1e-9, abs_tol=1e-12)  # what `dpconvert plan` printed is what ran
        if not ran_the_plan:
            raise DpconvertError(f"internal error: the mechanism's releases and ε differ from the plan's ({opts.releases}, ε={plan['epsilon']}); "
                                 "nothing was written")
        mechanism = self._mechanism_block(run, opts, plan, cfg, ctx.noise.card_fields, source, generator, job.members)
        claims = Claims(covers=list(COVERS_STUDENT), not_covered=NOT_COVERED + ([NOT_COVERED_PUBLIC_IMAGES] if run.public_data else []),
                        calibrated=plan["calibrated"], target_epsilon=run.eps if plan["calibrated"] else None,
                        extra={"replace_one_epsilon": accountant.replace_one_epsilon(delta=run.delta)})
        if opts.disjoint_partitions:  # the headline is record-level; the per-answer bound stays beside it
            claims.extra["query_level_epsilon"] = accountant.query_level_epsilon(delta=run.delta)
        images = job.public_image_counts()
        if images is not None:  # public queries: how much one source image weighs, and the ε for all of its answers
            mechanism["public_images"] = images
            claims.extra["per_image_epsilon"] = accountant.per_image_epsilon(delta=run.delta, max_rows=images["max_rows_per_image"])
        extra = {}
        if opts.save_generator:
            from dpconvert.generators.saved import generator_bytes

            cost = generator_cost(accountant, teacher, run.delta, mechanism)
            extra[opts.save_generator] = generator_bytes(generator, opts.generator, spec, cost)
        return MethodOutput(
            student=student, student_name=student_name, probe=job.synthesise(run.parity_inputs), rounds=rounds, warnings=warnings,
            extra_files=extra, generator=generator, mechanism=mechanism, accountant=accountant, delta=run.delta, claims=claims)

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

        student_name = run.student or default_student_name(spec, run.device)
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
        from dpconvert.distill.config import DpdfdConfig

        settings = dict(releases=opts.releases, batch_size=plan["batch_size"], sigma=plan["sigma"], clip=opts.clip,
                        prior_pool=opts.prior_pool, student_epochs=plan["student_epochs"], seed=run.seed,
                        distill_loss=opts.distill_loss, prior_fraction=1.0 if generator is None else 0.5,
                        minibatch=default_minibatch(teacher_spec), student_lr=opts.student_lr or default_student_lr(teacher_spec),
                        logit_adjust=opts.logit_adjust, new_sources_per_release=opts.new_sources_per_release,
                        student_data=PUBLIC_TARGETS[public_targets(run, opts, teacher_spec)],
                        amp=DEVICE_DEFAULTS[device_kind(run.device)].amp if opts.amp is None else (None if opts.amp == "off" else opts.amp))
        if opts.new_sources_per_release and settings["student_data"] != "sources":  # before any release
            raise DpconvertError("`new_sources_per_release` picks the images of per-image targets: give `public_data` or `prior_images`, "
                                 "or drop it")
        if settings["student_data"] == "sources" and opts.epochs:  # per-image targets: epochs over the queried images
            settings["student_samples"] = opts.epochs * prior.num_bases
        return DpdfdConfig(**settings)

    def _mechanism_block(self, run, opts: DpdfdOptions, plan: dict, cfg, noise_info: dict, source: str, generator, teacher_members) -> dict:
        return {
            "method": "dpdfd",
            "sigma": plan["sigma"], "clip": opts.clip, "batch_size": plan["batch_size"], "releases": opts.releases,
            "distill_loss": cfg.distill_loss, **noise_info,
            **({"teachers": len(teacher_members), "disjoint_partitions": bool(opts.disjoint_partitions)} if len(teacher_members) > 1 else {}),
            "distinct_inputs": True,  # Dpdfd.distinct_queries: no input twice in a release (the auditor checks for it)
            "distinct_across_releases": True,  # … nor twice in the run: every release skips the inputs answered before
            "max_answers_per_input": 1,
            "query_source": source + (f" + {opts.generator} generator" if generator is not None else "")
                            + (f", student-guided selection from a pool ×{cfg.prior_pool}" if cfg.prior_pool > 1 and opts.releases > 1 else ""),
            "config": cfg.to_dict(),
            "device_defaults": {"device": device_kind(run.device), "batch_size": opts.batch_size is None, "epochs": opts.epochs is None,
                                "student": run.student is None,
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


