"""The prior trial: which data-free prior family a teacher answers diversely, decided from a small first release.

The input shape cannot tell. A 3×64×64 ResNet-34 trained on Fashion-MNIST upsampled to RGB has the input of a
natural-image model, yet it calls 88 % of natural crops "bag" and its student learned 31 % from them against 56 % from
framed random fields; a published CIFAR-10 model calls 62 % of framed fields "automobile", and its student learned
36.7 % from natural crops against 26.7 % from a half-and-half mixture of the two (design simulation, ε = 1:
benchmarks/RESULTS.md, table 15). Looking at the teacher's answers to decide would spend ε outside the accounting,
so the decision is made from released rows only: before the main release, TRIAL_IMAGES fixed images of each
candidate family are queried TRIAL_VIEWS times each through the run's own mechanism (same σ and C, the run's secret
noise, every input answered once), each image's released targets are averaged, and the family whose images' top
classes spread over more classes — the exponential of the entropy of that histogram, the effective number of classes
— is the prior of the run. In the design simulation (the cached clean targets plus the release's noise, 200 draws)
50 images × 200 views chose framed fields for the ResNet-34 every time and natural crops for the CIFAR-10 model 87 %
of the time (`benchmarks/prior_trial_sim.py`; 10 000 rows: 80 %).

What it costs, stated on the card (``mechanism.prior_trial``, and the trial's event in the accounting state):

* query-level, per answer: the trial's inputs are distinct and never answered again (the main engine continues the
  trial's record of answered inputs), so the query-level ε is still one release's (docs/privacy.md);
* record-level worst case: the trial's rows compose with the main release's (its event is one of the card's);
* the trial's images are drawn from the data-free priors (stream ``prior_trial``): nobody's data.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Callable, Optional

from dpconvert.seeds import stream

log = logging.getLogger("dpconvert")

TRIAL_FAMILIES = ("framed_fields", "natural_crops")  # the candidates, in the order ties are broken
TRIAL_IMAGES = 50  # per family
TRIAL_VIEWS = 200  # released rows per image


def trial_applies(run, opts, spec) -> bool:
    """A trial where the user named no prior, the targets are data-free per-image ones, the input-shape rule would pick
    natural crops (RGB ≥ 32 px), and the accounting is per answer (under `accounting` composed the trial would be a
    further release to compose: the input-shape rule decides instead)."""
    from dpconvert.generators import default_prior_name

    from .dpdfd_options import data_free_images

    return (opts.prior is None and opts.accounting == "per-answer" and not opts.disjoint_partitions
            and default_prior_name(spec) == "natural_crops" and bool(data_free_images(run, opts, spec)))


def trial_rows(run, opts, spec) -> int:
    """Rows the trial releases (0 where none runs): they count among the run's answers (δ, time budget)."""
    return len(TRIAL_FAMILIES) * TRIAL_IMAGES * TRIAL_VIEWS if trial_applies(run, opts, spec) else 0


def effective_classes(targets) -> float:
    """exp(entropy) of the histogram of the targets' top classes: 1 when every image names one class, K when the
    images spread evenly over K."""
    import torch

    counts = torch.bincount(targets.argmax(1), minlength=targets.shape[1]).double()
    p = counts[counts > 0] / counts.sum()
    return float(torch.exp(-(p * p.log()).sum()))


@dataclass
class PriorTrial:
    chosen: str
    effective: dict  # family → effective number of classes of its released targets
    rows: int
    answered: object  # the engine's record of answered inputs, continued by the main release

    def card(self) -> dict:
        return {"rows": self.rows, "families": list(TRIAL_FAMILIES), "images_per_family": TRIAL_IMAGES, "views_per_image": TRIAL_VIEWS,
                "effective_classes": [round(self.effective[k], 3) for k in TRIAL_FAMILIES], "chosen": self.chosen}  # by family

    def describe(self) -> str:
        scores = ", ".join(f"{k} {v:.1f}" for k, v in self.effective.items())
        return f"prior trial ({self.rows:,} rows): classes named {scores} → {self.chosen}"


def draw_trial_images(spec, seed: int):
    """TRIAL_IMAGES from each family, in family order, from the ``prior_trial`` stream (not the run's prior images)."""
    import torch

    from dpconvert.generators import create_generator

    g = stream("prior_trial", seed)
    images = []
    for family in TRIAL_FAMILIES:
        prior = create_generator(family, spec)
        with torch.no_grad():
            images.append(prior(torch.randn(TRIAL_IMAGES, prior.nz, generator=g)))
    return torch.cat(images)


def run_prior_trial(make_engine: Callable, spec, seed: int, on_progress: Optional[Callable[[dict], None]] = None) -> PriorTrial:
    """The trial's release through ``make_engine(source, rows)`` (the run's mechanism and accountant), and the family
    chosen from what it released."""
    from dpconvert.distill.source_targets import SourceTargets
    from dpconvert.generators.public_images import PublicImageSource

    source = PublicImageSource(draw_trial_images(spec, seed), mix_prob=0.0, public=False)
    rows = len(TRIAL_FAMILIES) * TRIAL_IMAGES * TRIAL_VIEWS
    engine = make_engine(source, rows)
    if on_progress is not None:  # the release names its phases "release 1/1: …"
        engine.progress.callback = lambda info: on_progress({**info, "name": info["name"].replace("release 1/1", "prior trial")}
                                                            if info["kind"] == "phase" else info)
    z, targets, _ = engine.release(1)
    sums = SourceTargets(source.num_bases, targets.shape[1])
    sums.add(source.base_index(z).cpu(), targets.cpu())
    family = sums.active() // TRIAL_IMAGES
    means = sums.means()
    effective = {name: effective_classes(means[family == k]) for k, name in enumerate(TRIAL_FAMILIES)}
    chosen = max(TRIAL_FAMILIES, key=lambda name: (effective[name], -TRIAL_FAMILIES.index(name)))
    if not all(math.isfinite(v) for v in effective.values()):
        chosen = TRIAL_FAMILIES[-1]  # no usable rows: the input-shape rule's choice
    return PriorTrial(chosen, effective, rows, engine.answered)


def prior_trial(ctx, teacher, accountant, engine_config: Callable, on_progress=None) -> PriorTrial:
    """The trial of a conversion: its release through the run's mechanism, noise and accountant (``engine_config(source)``:
    the run's engine settings for a query source), on a student whose zeroed head answers s = 0 like the main release's
    first; the teacher is checked before it as before any release."""
    from dpconvert.mechanisms.dpdfd import Dpdfd as Engine
    from dpconvert.mechanisms.teacher_checks import PROBE_SIZE, check_teacher
    from dpconvert.seeds import seed_of
    from dpconvert.students import create_student, default_student_name

    run, spec = ctx.run, teacher.spec

    def engine(source, rows: int):
        cfg = dataclasses.replace(engine_config(source), batch_size=rows, releases=1, shrink_to_student=False,
                                  seed=seed_of("prior_trial_views", run.seed))
        student = create_student(run.student or default_student_name(spec, run.device), spec)
        job = Engine(teacher, student, None, cfg, accountant, device=run.device, prior=source, noise=ctx.noise, world=ctx.world)
        check_teacher(teacher, job.probe_inputs(PROBE_SIZE), job.probe_inputs(job.chunk))
        return job

    trial = run_prior_trial(engine, spec, run.seed, on_progress)
    log.info("%s", trial.describe())
    return trial
