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

from dpconvert.errors import DpconvertError, InternalError

from dpconvert.accounting.statements import NO_NOISE_WARNING, NOT_COVERED_GAN_QUERIES, NOT_COVERED_PUBLIC_IMAGES
from dpconvert.accounting.plans import DpdfdPlan

from .dpdfd_options import (
    DATA_FREE_DENOISE, PUBLIC_TARGETS, DpdfdOptions, DEVICE_DEFAULTS, ACCOUNTING, prior_images, public_targets,
    draw_prior_images, fixed_prior_images, device_kind, default_batch_size, default_epochs, engine_option_settings,
    default_minibatch, check_prior_name, distinct_answers_warning, GAN_QUERIES, gan_images,
    per_image_batch, default_student_samples, rows_for_budget, budget_fits, BUDGET_ROWS_GRID, time_budget_minutes, check_release_memory, release_rows_that_fit,
)
from .base import COVERS_STUDENT, NOT_COVERED, Claims, Method, MethodOutput, register
from .dpgan import gan_card_info, gan_query_source
from .prior_trial import prior_trial, trial_applies, trial_rows

log = logging.getLogger("dpconvert")


@register
class Dpdfd(Method):
    noise_free = True
    several_teachers = True
    queries_teacher = True
    takes_noise_multiplier = True

    name = "dpdfd"
    Options = DpdfdOptions
    summary = "data-free DPDFD (query-level)"
    listed_at = 0  # the method the product is named for
    data_free = True

    def auto_reason(self, run) -> Optional[str]:
        if run.private_data:
            return None
        if run.public_data:
            return "no private data: DPDFD (query-level) on augmented public-image queries (not data-free)"
        return "no private data: data-free DPDFD (query-level)"

    @classmethod
    def config_class(cls) -> type:
        from dpconvert.distill.config import DpdfdConfig

        return DpdfdConfig  # the engine's resolved settings (batch size, student data, …), not the options
    distributed = True

    def check_distributed(self, run, opts: DpdfdOptions) -> None:
        super().check_distributed(run, opts)
        if opts.generator == GAN_QUERIES:
            raise DpconvertError("`generator` dpgan trains its GAN in one process only", fix="run it without torchrun", param="generator")

    def describe_choice(self, opts: DpdfdOptions, reason: str) -> str:
        if opts.disjoint_partitions:  # the teachers' statement makes DPDFD's bound record-level
            return (f"{opts.disjoint_partitions} teachers on disjoint partitions of the private data (`disjoint_partitions`): DPDFD "
                    "averaging their rows, record-level")
        if opts.generator == GAN_QUERIES:  # the queries come from the private data: not data-free
            return ("chosen by name: DPDFD (query-level for the teacher's answers) on samples of a DP-critic GAN trained on the private "
                    "data (record-level for those records); not data-free")
        return reason

    def reads_private_records(self, opts: DpdfdOptions) -> bool:
        """Only the DP-critic GAN of `generator` dpgan reads them; the teacher's answers are post-processing of the teacher."""
        return opts.generator == GAN_QUERIES

    def check(self, run, opts: DpdfdOptions, out: Optional[Path] = None) -> None:
        if opts.generator == GAN_QUERIES:
            self._check_gan_queries(run, opts)
        elif run.private_data:
            raise DpconvertError("DPDFD reads no private data", fix="drop `private_data`, add `generator` dpgan (queries from a GAN with a DP "
                                 "critic trained on it), or choose a record-level `method` (dpsgd, pknn)", param="private_data")
        if run.public_data and opts.prior:
            raise DpconvertError("`prior` picks the data-free query prior and `public_data` replaces it", fix="drop one of them", param="prior")
        if opts.public_targets == "per-image" and not (run.public_data or opts.prior_images):
            raise DpconvertError(fix=f"`public_targets` {opts.public_targets} averages the answers about each image: it needs `public_data` "
                                 "or `prior_images` N", param="public_targets")
        if opts.prior_images and opts.generator != GAN_QUERIES and (opts.generator or opts.public_targets == "rows"):
            raise DpconvertError("`prior_images` averages the targets of fixed prior images", fix="drop `generator` and `public_targets` rows, "
                                 "or `prior_images`", param="prior_images")
        if opts.public_targets == "per-image" and opts.generator and opts.generator != GAN_QUERIES:
            raise DpconvertError(f"`public_targets` {opts.public_targets} and `generator` are alternatives", fix="drop one of them", param="public_targets")
        if opts.prior:
            check_prior_name(opts.prior)
        if opts.save_generator:
            from dpconvert.generators.saved import check_generator_path

            check_generator_path(opts.save_generator, out, opts.generator not in (None, GAN_QUERIES), run.force)

    def _check_gan_queries(self, run, opts: DpdfdOptions) -> None:
        """`generator` dpgan: private records to train the GAN on, and nothing that would replace its samples."""
        if not run.private_data:
            raise DpconvertError("`generator` dpgan trains a GAN with a DP critic on `private_data`", fix="give the private data", param="generator")
        clashes = [(run.public_data, "`public_data`"), (opts.prior, "`prior`"), (opts.public_targets == "rows", "`public_targets` rows"),
                   (opts.disjoint_partitions, "`disjoint_partitions`"), (opts.accounting != "per-answer", "`accounting` composed")]
        for given, name in clashes:
            if given:
                raise DpconvertError("`generator` dpgan makes the queries from the DP-critic GAN", fix=f"drop {name}", param="generator")

    def plan(self, run, opts: DpdfdOptions, spec, queries: Optional[int] = None) -> DpdfdPlan:
        from dpconvert.accounting.dpdfd import epsilon as dpdfd_epsilon
        from dpconvert.accounting.planning import plan_dpdfd
        from dpconvert.generators.public_images import PublicImageSource
        from dpconvert.options import DEFAULT_DELTA, units_delta

        per_image = public_targets(run, opts, spec) == "per-image"
        device_b = default_batch_size(spec, run.device)
        batch_size = opts.batch_size or (max(per_image_batch(run, opts, spec), device_b) if per_image else device_b)
        # per-image targets keep each view as its z (Dpdfd.store_z: sources), not as an image
        check_release_memory(batch_size, spec, PublicImageSource.NZ if per_image else spec.channels * spec.height * spec.width)
        trial = trial_rows(run, opts, spec)  # the prior trial's answers (methods/prior_trial.py), before the main release
        delta = units_delta(batch_size * opts.releases + trial) if run.delta_is_default else run.delta  # δ ≤ 1/answers by default
        if opts.disjoint_partitions and run.delta_is_default:  # record-level: δ also within the other methods' default for records
            delta = min(delta, DEFAULT_DELTA)
        plan = plan_dpdfd(eps=run.eps, delta=delta, steps=opts.releases, batch_size=batch_size, noise_multiplier=run.noise_multiplier,
                          per_answer=opts.accounting == "per-answer", disjoint_teachers=opts.disjoint_partitions or 0)
        if trial:  # its rows compose with the others in the record-level worst case (same σ: one Gaussian over all rows)
            plan = dataclasses.replace(plan, prior_trial_rows=trial, record_level_epsilon=dpdfd_epsilon(
                sigma=plan.sigma, steps=1, delta=delta, batch_size=batch_size * opts.releases + trial, scope="record"))
        plan.student_epochs = opts.epochs or default_epochs(spec, run.device)
        plan.time_budget = time_budget_minutes(run, opts, spec)  # `dpconvert plan`: convert sizes B (Dpdfd._budgeted_plan)
        images = prior_images(run, opts, spec, batch_size) if per_image and not run.public_data else 0  # public images: counted when loaded
        if images or not per_image:  # what each target the student learns from averages (distill/verdict.py)
            plan.answers_per_target = batch_size * opts.releases / images if images else 1
            plan.target_noise_to_signal = spec.num_classes * plan.sigma ** 2 / plan.answers_per_target
        if opts.generator == GAN_QUERIES:
            plan = self._plan_gan_queries(run, opts, plan)
        return plan

    def _plan_gan_queries(self, run, opts: DpdfdOptions, plan: DpdfdPlan) -> DpdfdPlan:
        """`generator` dpgan: the critic's planned event beside the planned releases, replayed by the accountant the run
        records to, so the plan's second scope and record-level worst case are the card's."""
        from dpconvert.accounting import DpganDpdfdAccountant

        from .dpgan import planned_events

        acc = DpganDpdfdAccountant(events=planned_events(opts.gan, self._gan_epsilon(run, opts), plan.delta))
        acc.record("normalised_gaussian_release", count=plan.steps, sigma=plan.sigma, clip=opts.clip, batch_size=plan.batch_size)
        return dataclasses.replace(plan, adjacency=acc.adjacency, record_level_epsilon=acc.record_level_epsilon(delta=plan.delta),
                                   queries_record_level_epsilon=acc.queries_record_level_epsilon(delta=plan.delta),
                                   gan_sigma=acc.parts()[1].events[0].params["sigma"], gan_images=gan_images(opts))

    def _budgeted_plan(self, ctx, run, opts: DpdfdOptions, teacher) -> DpdfdPlan:
        """The plan, with B sized to the time budget where one applies (`time_budget`): a throwaway engine (the run's
        models, nothing released, nothing drawn from the noise) times the teacher and the student here, and B is the
        rows that fit. The plan then follows from that B as from a given one (δ = 1/(B·T) by default)."""
        spec = teacher.spec
        minutes = time_budget_minutes(run, opts, spec, ctx.world.distributed)
        plan = self.plan(run, opts, spec)
        if minutes is None:
            return dataclasses.replace(plan, time_budget=None)
        import torch

        from dpconvert.accounting import ACCOUNTANTS
        from dpconvert.generators.public_images import PublicImageSource
        from dpconvert.mechanisms.dpdfd import Dpdfd as Engine
        from dpconvert.profiling import sustained_seconds

        torch.manual_seed(run.seed)
        student, _, prior, _, generator = self._models(run, opts, spec, rows=BUDGET_ROWS_GRID[0])  # few images: only timed
        probe = Engine(teacher, student, generator, self._engine_config(run, opts, plan, generator, spec, prior),
                       ACCOUNTANTS.get(self._accountant_name(opts))(), device=run.device, prior=prior, noise=ctx.noise, world=ctx.world)
        fit = release_rows_that_fit(spec, PublicImageSource.NZ)  # per-image targets keep each view as its z
        timed = probe.estimate(timing=sustained_seconds)
        trial = trial_rows(run, opts, spec)
        rows = rows_for_budget(timed, minutes, plan.batch_size, None if fit is None else fit // 2, also_rows=trial)
        return dataclasses.replace(self.plan(run, dataclasses.replace(opts, batch_size=rows, time_budget=None), spec), time_budget=minutes,
                                   rows_sized=True, over_budget=not budget_fits(timed, minutes, plan.batch_size, rows + trial))

    def _accountant(self, opts: DpdfdOptions, gan):
        from dpconvert.accounting import ACCOUNTANTS

        accountant = ACCOUNTANTS.get(self._accountant_name(opts))()
        if gan is not None:  # the critic's release comes first: the queries are post-processing of it
            for e in gan.accountant_state["events"]:
                accountant.record(e["mechanism"], count=e["count"], **e["params"])
        return accountant

    def _engine(self, ctx, opts: DpdfdOptions, plan: DpdfdPlan, teacher, gan, accountant, trial, on_progress):
        """The main release's engine on the run's models, continuing the prior trial's answered inputs; the teacher checked
        and the run's estimate shown before any of its releases."""
        import torch

        from dpconvert.mechanisms.dpdfd import Dpdfd as Engine
        from dpconvert.mechanisms.teacher_checks import PROBE_SIZE, check_teacher

        run, spec = ctx.run, teacher.spec
        torch.manual_seed(run.seed)
        student, student_name, prior, source, generator = self._models(run, opts, spec, gan, plan.batch_size)
        cfg = self._engine_config(run, opts, plan, generator, spec, prior)
        job = Engine(teacher, student, generator, cfg, accountant, device=run.device, prior=prior, noise=ctx.noise, world=ctx.world)
        if trial is not None:
            job.answered = trial.answered  # no input the trial asked is asked again (per-answer accounting)
        check_teacher(teacher, job.probe_inputs(PROBE_SIZE), job.probe_inputs(job.chunk))  # independent, finite rows, before any release
        if on_progress:
            on_progress(job.estimate())  # how long this will take, before the long part
            if run.teacher_diagnostics:  # un-noised answers' statistics: the operator's, only on request
                job.attach_holdout()
        return job, student, student_name, source, generator, cfg

    @staticmethod
    def _gan_epsilon(run, opts: DpdfdOptions) -> float:
        return opts.generator_eps if opts.generator_eps is not None else run.eps

    def run(self, ctx, opts: DpdfdOptions, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        from dpconvert.distill.rounds import DpdfdRounds

        run = ctx.run  # the pipeline checked run and opts before loading anything (Method.check)
        teachers = len(getattr(teacher, "members", None) or [teacher])
        if opts.disjoint_partitions is not None and opts.disjoint_partitions != teachers:
            raise DpconvertError(f"`disjoint_partitions` says {opts.disjoint_partitions} teachers on disjoint partitions but {teachers} "
                                 f"{'was' if teachers == 1 else 'were'} given", fix=f"give all {opts.disjoint_partitions} teacher files (or their folder)"
                                 + (f", or set `disjoint_partitions` {teachers}" if teachers > 1 else ""), param="disjoint_partitions")
        spec = teacher.spec
        plan = self._budgeted_plan(ctx, run, opts, teacher)
        run = dataclasses.replace(run, delta=plan.delta)  # the δ the plan resolved is the one every bound uses
        warnings = self._warnings(run, plan)
        if on_plan:
            on_plan(plan)
        gan = self._train_gan(ctx, opts, spec, run.delta, on_progress) if opts.generator == GAN_QUERIES else None
        accountant = self._accountant(opts, gan)
        trial = (prior_trial(ctx, teacher, accountant, lambda source: self._engine_config(run, opts, plan, None, spec, source), on_progress)
                 if trial_applies(run, opts, spec) else None)
        opts = opts if trial is None else dataclasses.replace(opts, prior=trial.chosen)  # the family the released rows chose
        job, student, student_name, source, generator, cfg = self._engine(ctx, opts, plan, teacher, gan, accountant, trial, on_progress)
        warnings += ctx.noise.warnings
        rounds: list = []
        done = DpdfdRounds(job).run(rounds.append, _with_epsilon(on_progress, accountant, run.delta))  # releases, and training on them
        if job.mechanism.zeroed_rows and run.teacher_diagnostics:  # how many answers were non-finite depends on the teacher
            log.warning("note (console only): %d teacher answers were not finite and were released as zero rows (pure noise)",
                        job.mechanism.zeroed_rows)
        ran_the_plan = accountant.count("normalised_gaussian_release") == opts.releases + (trial is not None) and math.isclose(
            accountant.epsilon(delta=run.delta), plan.epsilon, rel_tol=1e-9, abs_tol=1e-12)  # what `dpconvert plan` printed is what ran
        if not ran_the_plan:
            raise InternalError(f"the mechanism's releases and ε differ from the plan's ({opts.releases}, ε={plan.epsilon}); "
                                 "nothing was written")
        verdict = self._verdict(job, done, plan.sigma, warnings)
        mechanism = self._mechanism_block(run, opts, plan, cfg, ctx.noise.card_fields, source, generator, job.members)
        if trial is not None:
            mechanism["prior_trial"] = trial.card()
        claims = self._claims(run, opts, plan, accountant, mechanism, job.public_image_counts())
        if gan is not None:
            mechanism["query_generator"] = gan_card_info(gan, gan_images(opts), run.delta)
        extra = {}
        if opts.save_generator:
            from dpconvert.generators.saved import dpdfd_generator_cost, generator_bytes

            cost = dpdfd_generator_cost(accountant, teacher, run.delta, mechanism)
            extra[opts.save_generator] = generator_bytes(generator, opts.generator, spec, cost)
        return MethodOutput(
            student=student, student_name=student_name, probe=job.synthesise(run.parity_inputs), rounds=rounds, warnings=warnings,
            extra_files=extra, generator=generator, mechanism=mechanism, accountant=accountant, delta=run.delta, claims=claims,
            verdict=verdict)

    # ------------------------------------------------------------ pieces of run
    @staticmethod
    def _verdict(job, done, sigma: float, warnings: list) -> dict:
        """What the release says about the student (post-processing: costs no ε); a weak student is a warning too."""
        from dpconvert.distill.verdict import student_verdict

        verdict = student_verdict(job, done, sigma)
        if verdict.weak:
            warnings.append(verdict.note)
        return verdict.to_dict()

    @staticmethod
    def _claims(run, opts: DpdfdOptions, plan: DpdfdPlan, accountant, mechanism: dict, images) -> Claims:
        """What the card states beside the figures the accountant answers (``guarantee_figures``): what is covered, and
        for public images the ε of all the answers about one image."""
        claims = Claims(covers=list(COVERS_STUDENT), not_covered=NOT_COVERED + ([NOT_COVERED_PUBLIC_IMAGES] if run.public_data else []),
                        calibrated=plan.calibrated, target_epsilon=run.eps if plan.calibrated else None)
        if opts.generator == GAN_QUERIES:  # the second scope (the accountant's queries_record_level_epsilon)
            claims.not_covered.append(NOT_COVERED_GAN_QUERIES)
        if images is not None:  # public queries: how much one source image weighs, and the ε for all of its answers
            mechanism["public_images"] = images
            claims.extra["per_image_epsilon"] = accountant.per_image_epsilon(delta=run.delta, max_rows=images["max_rows_per_image"])
        return claims

    @staticmethod
    def _accountant_name(opts: DpdfdOptions) -> str:
        if opts.disjoint_partitions:
            return "dpdfd_disjoint_teachers"
        return "dpdfd_per_answer+dpgan" if opts.generator == GAN_QUERIES else ACCOUNTING[opts.accounting]

    def _train_gan(self, ctx, opts: DpdfdOptions, spec, delta: float, on_progress):
        """The DP-critic GAN on the private records (opened only by the privacy kernel), at its own record-level ε and the run's δ."""
        from .dpgan import train_dpgan

        return train_dpgan(ctx, opts.gan, spec, self._gan_epsilon(ctx.run, opts), delta, on_progress)

    def _warnings(self, run, plan: DpdfdPlan) -> list:
        warnings = []
        if plan.sigma == 0:
            warnings.append(NO_NOISE_WARNING)
        w = distinct_answers_warning(run.delta, plan.batch_size * plan.steps + plan.prior_trial_rows)
        if w:
            warnings.append(w)
        return warnings

    def _models(self, run, opts: DpdfdOptions, spec, gan=None, rows: Optional[int] = None):
        """(student, its name, query prior, query-source description, learned generator or None); ``rows``: the plan's B
        (the fixed prior images of a large input follow it)."""
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
                raise DpconvertError(f"{run.public_data}: the public set is empty", fix="give public images or drop `public_data`", param="public_data")
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
        elif gan is not None:
            prior, source = gan_query_source(gan, gan_images(opts), spec, run.seed)
            return student, student_name, prior, source, None
        elif n_prior := prior_images(run, opts, spec, rows):
            prior, source = fixed_prior_images(run, opts, spec, n_prior)
        else:
            name = opts.prior or default_prior_name(spec)
            prior, source = create_generator(name, spec), PRIORS[name]
        generator = create_generator(opts.generator, spec) if opts.generator else None
        return student, student_name, prior, source, generator

    def _engine_config(self, run, opts: DpdfdOptions, plan: DpdfdPlan, generator, teacher_spec, prior):
        from dpconvert.distill.config import DpdfdConfig

        settings = dict(engine_option_settings(opts, teacher_spec, run.device, run), batch_size=plan.batch_size, sigma=plan.sigma,
                        student_epochs=plan.student_epochs, seed=run.seed, prior_fraction=1.0 if generator is None else 0.5,
                        minibatch=default_minibatch(teacher_spec), student_data=PUBLIC_TARGETS[public_targets(run, opts, teacher_spec)],
                        amp=DEVICE_DEFAULTS[device_kind(run.device)].amp if opts.amp is None else (None if opts.amp == "off" else opts.amp))
        if opts.new_sources_per_release and settings["student_data"] != "sources":  # before any release
            raise DpconvertError("`new_sources_per_release` picks the images of per-image targets",
                                 fix="give `public_data` or `prior_images`, or drop it", param="new_sources_per_release")
        if opts.shrink_to_student and settings["student_data"] != "sources":
            raise DpconvertError("`shrink_to_student` shrinks per-image targets", fix="give `public_data` or `prior_images`, or drop it",
                                 param="shrink_to_student")
        if settings["student_data"] == "sources" and not run.public_data and opts.generator != GAN_QUERIES:
            settings["denoise"] = DATA_FREE_DENOISE
        if settings["student_data"] == "sources" and (samples := default_student_samples(run, opts, teacher_spec, prior.num_bases)):
            settings["student_samples"] = samples
        return DpdfdConfig(**settings)

    def _mechanism_block(self, run, opts: DpdfdOptions, plan: DpdfdPlan, cfg, noise_info: dict, source: str, generator, teacher_members) -> dict:
        return {
            "method": self.name,
            "sigma": plan.sigma, "clip": opts.clip, "batch_size": plan.batch_size, "releases": opts.releases,
            "distill_loss": cfg.distill_loss, **noise_info,
            **({"teachers": len(teacher_members), "disjoint_partitions": bool(opts.disjoint_partitions)} if len(teacher_members) > 1 else {}),
            "distinct_inputs": True,  # Dpdfd.distinct_queries: no input twice in a release (the auditor checks for it)
            "distinct_across_releases": True,  # … nor twice in the run: every release skips the inputs answered before
            "max_answers_per_input": 1,
            "query_source": source + (f" + {opts.generator} generator" if generator is not None else "")
                            + (f", student-guided selection from a pool ×{cfg.prior_pool}" if cfg.prior_pool > 1 and opts.releases > 1 else ""),
            "config": cfg.to_dict(),
            "device_defaults": {"device": device_kind(run.device), "batch_size": opts.batch_size is None, "epochs": opts.epochs is None,
                                "student": run.student is None, "amp": opts.amp is None,  # which settings came from DEVICE_DEFAULTS
                                **({"batch_size_timed": True} if plan.rows_sized else {})},  # … or B from `time_budget` here
        }


def _with_epsilon(on_progress, accountant, delta: float):
    """A phase's start carries the ε spent so far, computed here (the CLI only prints it); advances pass as they are
    (they come every minibatch)."""
    if on_progress is None:
        return None
    return lambda info: on_progress({**info, "epsilon": accountant.epsilon(delta=delta)} if info["kind"] == "phase" else info)
