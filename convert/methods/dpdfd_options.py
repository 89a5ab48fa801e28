"""DPDFD's options and the defaults it picks for what the user left out (by input size and device).

Every default here was chosen by a measurement in benchmarks/RESULTS.md; ``plan`` and ``convert`` both read them, so
what ``dpconvert plan`` prints is what a default conversion runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from dpconvert.errors import DpconvertError, OptionError
from dpconvert.option_fields import check_choices, changed_options, nested, option
from dpconvert.seeds import stream

from .dpgan import GanOptions

DEFAULT_DISTILL_LOSS = "logits"  # chosen by benchmark (benchmarks/RESULTS.md)
RELEASE_ROWS_DEFAULT = 2048  # the student's minibatch over released rows (small inputs)
LARGE_INPUT_MINIBATCH = 64  # … and above 3×32×32: an ImageNet-sized student's activations for 2 048 rows would not fit
PUBLIC_TARGETS = {"rows": "rows", "per-image": "sources"}  # `public_targets` → the engine's student_data
PER_IMAGE_BATCH = 1_000_000  # per-image targets: rows per release by default (200 per image for 5 000 public images)
# data-free default for 28×28-sized inputs (256 < C·H·W ≤ 1024): views of 5 000 fixed prior images, 600 each (3 M rows),
# targets averaged per image and shrunk towards a first student's answers (`shrink_to_student`). Fashion-MNIST CNN
# teacher, ε = 1, δ = 1e-5: 72.2 / 73.8 / 71.6 % on seeds 0–2 (26–32 min alone on 2 CPU cores, 1.8 GB peak) against
# 68.1 / 63.3 % for 1 M rows of 2 500 images with the same shrinkage and 62.3 / 63.9 % for the former default (1 M × 2 500,
# no shrinkage); the held-out second teacher 66.3 / 68.8 / 67.8 % against 64.1 % (benchmarks/RESULTS.md, table 15). One target per
# prior sample gave 56.5 % (table 2); larger inputs: LARGE_INPUT_VIEWS_PER_IMAGE; 8×8: one target per sample. On CPU in
# one process B is sized to DEFAULT_TIME_BUDGET_MINUTES instead (below); DATA_FREE_PER_IMAGE_BATCH is B on a GPU, under
# torchrun, and in `dpconvert plan`, which has no teacher to time
DEFAULT_PRIOR_IMAGES = 5000
# above 28×28-sized inputs, as many fixed prior images as give each ~300 views of B (3×64×64 ResNet-34 Fashion-MNIST
# teacher: 150 000–200 000 rows fit its budget on 2 cores, 500 images × 300 views gave 56 % in the design simulation
# against 31–32 % for one target per row; the published CIFAR-10 model: 1 333 × 300, 35.0 % against 31.7 %: RESULTS
# table 15). Up to 3×64×64, where it was measured: a 224-px teacher answers ~35 rows/s here, so the budget's first step
# (100 000 rows) would take ~50 min; it keeps one target per row (16 384 rows, ~14 min: RESULTS table 11)
LARGE_INPUT_VIEWS_PER_IMAGE = 300
LARGE_INPUT_MIN_IMAGES = 100
LARGE_INPUT_MOST_VALUES = 3 * 64 * 64
# … and their student sees 200 000 views in all, not 400 000 (on 500 images: 400 passes, not 800, over noisy targets).
# ResNet-34, 500 framed images × 300 views, design simulation: 59.2 % against 56.5 %, in half the student's time
LARGE_INPUT_STUDENT_SAMPLES = 200_000
DATA_FREE_PER_IMAGE_BATCH = 3_000_000
# data-free prior images on CPU: B (rows per release) is sized to a time budget from the teacher's speed measured before
# the run (Dpdfd._budgeted_plan), not fixed: a teacher twice as fast gets twice the answers, each target averages more of
# them. B is the largest step of BUDGET_ROWS_GRID that fits (1.2–1.33× apart: fine enough that a slow teacher is not
# cut to two thirds of what fits — the ResNet-34 gains most per row there — and coarse enough that a repeated run on the
# same machine mostly asks for the same B); the plan prints it and `batch_size` B repeats it anywhere. The bar this serves: a default run ≤ 30 min on 2 cores (benchmarks/RESULTS.md, table 15)
DEFAULT_TIME_BUDGET_MINUTES = 25.0
# from 100 000 rows: a 3×64×64 ResNet-34 answers ~220 rows/s on 2 cores, so 150 000–200 000 rows fit 25 minutes beside
# its student (fewer answers per image make noisier targets: the plan prints their noise-to-signal); 20 M rows of 28×28
# views peak at ~10 GB (3.1 GB measured at 6.5 M), and no step above a quarter of the machine's memory by
# `release_rows_that_fit`'s count is taken
BUDGET_ROWS_GRID = tuple(int(m * 1_000_000) for m in (0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1, 1.25, 1.5, 2, 2.5, 3, 4,
                                                     5, 6, 8, 10, 12, 16, 20))
BUDGET_SHARE = 0.9  # of the budget for the phases the estimate times (export, evaluation and start-up take the rest)
DEFAULT_GAN_IMAGES = 2500  # `generator` dpgan: fixed GAN samples queried as views (methods/dpgan.py; RESULTS table 14)
# their averaged targets are used as released, not shrunk by the empirical-Bayes mixture (`source_targets.DENOISERS`):
# on prior images the mixture's components follow the few common classes and pull the rare ones into them (Fashion-MNIST
# CNN teacher, ε = 1, 1 000 000 rows, seed 0: 59.3 % without it against 49.4 % with it; the simulation agreed, 63.6 against
# 53.2 %: benchmarks/RESULTS.md, table 15). Public images keep it (measured in domain, table 3).
DATA_FREE_DENOISE = "none"
AMP = ("bf16", "off")
ACCOUNTING = {"per-answer": "dpdfd_per_answer", "composed": "dpdfd"}  # `accounting` → the accountant
GAN_QUERIES = "dpgan"  # `generator` dpgan: the queries are samples of a GAN with a DP critic trained on `private_data`
DISTILL_LOSS_NAMES = ("logits", "ce", "kd")  # mechanisms/output_gradients.py: DISTILL_LOSSES (a test keeps them equal)


@dataclass
class DpdfdOptions:
    PANEL: ClassVar[str] = "DPDFD (data-free, query-level)"
    releases: int = option(1, help="Noisy releases T; with per-answer accounting the query-level ε is one release's for any T.", flag="steps",
                           plan=True)
    batch_size: Optional[int] = option(None, help="Rows per release B (free for the query-level ε; the student's signal grows with √B).",
                                       default_text="from the input size and device (data-free prior images on CPU: sized to `time_budget`)", plan=True)
    time_budget: Optional[float] = option(None, help="Minutes the run may take here: B is sized to them from the teacher's speed, timed "
                                          "before the run (per-image targets; the plan prints B, and `batch_size` B repeats it).",
                                          default_text=f"{DEFAULT_TIME_BUDGET_MINUTES:g} for data-free prior images on CPU, else off")
    clip: float = option(1.0, help="Row norm C of the normalised output gradients.")
    epochs: Optional[int] = option(None, help="Student passes over the released pairs after each release (per-image targets: passes over "
                                   "the images, 400 000 views in all by default, 200 000 above 28×28).", default_text="from the input size")
    distill_loss: str = option(DEFAULT_DISTILL_LOSS, help="L_T: logits (centred logit matching, the whole class ranking per query), ce "
                               "(the paper's: teacher argmax only) or kd.", choices=DISTILL_LOSS_NAMES)
    generator: Optional[str] = option(None, help="A learned generator mixed with the data-free prior (e.g. dafl), or dpgan: the queries are "
                                      "views of samples of a GAN with a DP critic trained on `private_data` (record-level for those "
                                      "records, stated beside the query-level ε).", default_text="the prior only")
    generator_eps: Optional[float] = option(None, help="With `generator` dpgan: the DP-critic GAN's record-level ε (its own scope, at the "
                                            "run's δ; the teacher's answers keep `eps`).", default_text="`eps`", plan=True)
    gan: GanOptions = nested(GanOptions, prefix="gan", panel="DPDFD: DP-critic GAN queries (`generator` dpgan)",
                             help="`generator` dpgan: the DP-critic GAN trained on the private data (methods/dpgan.py)")
    prior: Optional[str] = option(None, help="The data-free query prior: random_fields (smooth blobs and strokes), centred_fields (the same "
                                  "inside a centred ellipse), mirrored_fields (centred, half of them left-right symmetric), framed_fields "
                                  "(mirrored, stretched to fill the frame), natural_crops (augmented crops of public photographs that "
                                  "scikit-image, scikit-learn and matplotlib ship; named with their licences on the card) or fields_and_crops (½ each).",
                                  default_text="from the input size; RGB 32–64 px: a prior trial of 20 000 rows picks one")
    prior_pool: int = option(10, help="Later releases pick a class-balanced selection out of pool × B prior samples.", cli=False)
    # with public_data: "per-image" (the targets of all views of one image are averaged and denoised) or "rows" (every view
    # of a public image is a training pair with its own noisy target). per-image is the default: at ε = 1 it measured
    # better on in-domain and on out-of-domain images, 85.0 vs 80.2 % and 48.7 vs 42.8 %; rows keeps more without noise
    # (σ = 0, out of domain: 72.1 vs 55.6 %) — benchmarks/RESULTS.md, table 3
    public_targets: Optional[str] = option(None, help="per-image (the views' targets averaged per image and denoised; B defaults to "
                                           "1 000 000; for data-free prior images it is sized to `time_budget`) or rows (one noisy target per view).", choices=tuple(PUBLIC_TARGETS),
                                           default_text="per-image with `public_data` or `prior_images`, else rows", plan=True)
    # data-free per-image targets: draw this many fixed images from the prior (from the seed) and query views of each one
    # many times, so their released targets can be averaged like public images'; None/0: one target per prior sample
    # (rows). None: DEFAULT_PRIOR_IMAGES for 28×28-sized inputs when nothing else is the query source, else 0
    prior_images: Optional[int] = option(None, help="Data-free per-image targets: N fixed images drawn from the prior, views of each queried "
                                         "many times so their targets can be averaged (B is sized to `time_budget`); 0 turns it off. With "
                                         "`public_data`: N prior images beside the public ones.",
                                         default_text=f"{DEFAULT_PRIOR_IMAGES} for 28×28-sized inputs, B/{LARGE_INPUT_VIEWS_PER_IMAGE} up to 3×64×64, else 0",
                                         plan=True)
    amp: Optional[str] = option(None, help="bf16 (teacher and student forward under bf16 autocast; the release stays fp32) or off.",
                                choices=AMP, default_text="bf16 on CUDA, off on CPU")
    save_generator: Optional[str] = option(None, help="Save the learned generator and what it cost to FILE.safetensors (with `generator`; "
                                           "Private-kNN: with `query_generator` train).")
    # per-answer: no input is answered twice over the run (the engine enforces it across releases), so the query-level ε
    # is one release's for any number of releases (docs/privacy.md); composed: the T releases compose (the bound for
    # runs whose cost is reused elsewhere, e.g. Private-kNN's query generator)
    accounting: str = option("per-answer", help="per-answer (the engine never answers an input twice, so the query-level ε is one release's "
                             "for any `releases`) or composed (the releases compose).", choices=tuple(ACCOUNTING), plan=True)
    # several teachers trained on N disjoint partitions of the private data (the user's statement: dpconvert cannot see
    # their training data): each released row is the mean of their normalised rows, one record moves it by ≤ 2C/N, and
    # `eps` becomes record-level (accounting/dpdfd.py, "record_disjoint"); N must equal the number of teachers given
    disjoint_partitions: Optional[int] = option(None, help="N: the N teachers given were each trained on its own one of N disjoint parts of "
                                                "the private data (your statement, recorded on the card). `eps` is then record-level.",
                                                default_text="off: one teacher, or teachers that may share records", plan=True)
    # Python only (benchmarks/RESULTS.md measured each; the CLI does not offer them)
    student_lr: Optional[float] = option(None, help="Peak learning rate of the student's cosine schedule.",
                                         default_text="4e-3 for inputs of ≤ 256 values, else 2e-3", cli=False)
    logit_adjust: bool = option(True, help="Subtract the student's mean logits over the released queries from its head bias (post-processing; "
                                "out of domain it measured 48.7 % against 36.0 % without).", cli=False)
    # an ALIBI-style second pass ("Antipodes of Label Differential Privacy: PATE and ALIBI", Malek et al. 2021), all of it
    # post-processing of the released targets. Fashion-MNIST CNN teacher, ε = 1 (benchmarks/RESULTS.md, table 15): the
    # product gained 1.3 points on the one seed measured both ways (62.3 → 63.6 %), the design simulation 1.0 and 8.2; on
    # by default for data-free prior images as part of the recipe measured on three seeds (DEFAULT_PRIOR_IMAGES), off
    # for public images (their targets keep the empirical-Bayes denoiser, measured in domain)
    shrink_to_student: Optional[bool] = option(None, help="Per-image targets: train a first student, replace each averaged target by its posterior "
                                               "mean under a Gaussian prior centred on that student's answer, then train the student again from "
                                               "its initial weights on them (post-processing: no ε; about twice the student's time).",
                                               default_text="on for data-free prior images (`prior_images`), else off")
    new_sources_per_release: int = option(0, help="Per-image targets over several `releases`: each release queries views of this many new "
                                           "images, those the student is least sure about (0: every image in every release).", cli=False)

    def __post_init__(self) -> None:
        if isinstance(self.gan, dict):  # rebuilt from ``dataclasses.asdict`` (Private-kNN's in-run generator options)
            self.gan = GanOptions(**self.gan)
        if self.releases < 1:
            raise DpconvertError(fix="`releases` must be >= 1", param="releases")
        if self.batch_size is not None and self.batch_size < 1:
            raise DpconvertError(fix="`batch_size` must be >= 1", param="batch_size")
        if self.time_budget is not None and not (self.time_budget > 0 and math.isfinite(self.time_budget)):
            raise DpconvertError(fix="`time_budget` must be a number of minutes > 0", param="time_budget")
        if self.time_budget is not None and self.batch_size is not None:
            raise DpconvertError("`time_budget` sizes `batch_size` from the teacher's speed", fix="give one of them", param="time_budget")
        if not self.clip > 0:
            raise DpconvertError(fix="`clip` must be > 0", param="clip")
        if self.epochs is not None and self.epochs < 1:
            raise DpconvertError(fix="`epochs` must be >= 1", param="epochs")
        if self.prior_pool < 1:
            raise DpconvertError(fix="`prior_pool` must be >= 1", param="prior_pool")
        if self.prior_images is not None and self.prior_images < 0:
            raise DpconvertError(fix="`prior_images` must be >= 0", param="prior_images")
        if self.student_lr is not None and not self.student_lr > 0:
            raise DpconvertError(fix="`student_lr` must be > 0", param="student_lr")
        if self.new_sources_per_release < 0:
            raise DpconvertError(fix="`new_sources_per_release` must be >= 0", param="new_sources_per_release")
        if self.disjoint_partitions is not None and self.disjoint_partitions < 2:
            raise DpconvertError("`disjoint_partitions` N must be >= 2 (one teacher per partition)", fix="drop it for one teacher", param="disjoint_partitions")
        if self.disjoint_partitions is not None and self.accounting != "per-answer":
            raise DpconvertError("`disjoint_partitions` uses per-answer accounting for its query-level bound", fix="drop `accounting` composed", param="accounting")
        if self.generator_eps is not None and not (self.generator_eps > 0 and math.isfinite(self.generator_eps)):
            raise DpconvertError(fix="`generator_eps` must be a finite number > 0", param="generator_eps")
        if self.generator != GAN_QUERIES:
            if self.generator_eps is not None:
                raise DpconvertError("`generator_eps` is the DP-critic GAN's ε", fix="use it with `generator` dpgan", param="generator_eps")
            if changed_options(self.gan):
                raise DpconvertError(f"`gan_{changed_options(self.gan)[0]}` configures the DP-critic GAN", fix="use it with `generator` dpgan", param="generator")
        check_choices(self)


@dataclass(frozen=True)
class DeviceDefaults:
    """What DPDFD picks for what the user left out, by the kind of device the run is on (the card records it)."""

    batch_sizes: tuple  # (most input values C·H·W, rows per release) by size, the last for every larger input
    epochs: tuple  # (most input values C·H·W, student passes over the rows) by size, the last for every larger input
    amp: Optional[str]  # "bf16": teacher and student forward under bf16 autocast (normalisation and noise stay fp32)


DEVICE_DEFAULTS = {
    # sized so a conversion fits a few minutes on 2 CPU cores (benchmarks/RESULTS.md). Above 3×32×32 the teacher's
    # forward pass is the cost: a 224-px ResNet-34 answers ~35 rows/s on 2 cores, so 16 384 rows fit the 15-minute budget
    # of a default conversion with the reduced-resolution student (students/reduced.py; the ResNet-34 table). On 8×8
    # inputs 750 000 rows × 2 passes beat 300 000 × 5 at the same optimiser steps (fresh noise on every row the
    # student sees twice, and 2.5× the rows for the ridge head): 94.75 against 93.97 % on six seeds of the digits,
    # ahead on five; fewer steps lost (RESULTS.md, table 1). Above 3×32×32 each pass re-renders every input: 2 passes.
    "cpu": DeviceDefaults(((64, 750_000), (256, 300_000), (1024, 100_000), (3 * 64 * 64, 32_768), (math.inf, 16_384)),
                          ((64, 2), (256, 5), (3 * 32 * 32, 8), (math.inf, 2)), None),
    # a GPU answers ~20× the rows in the time: Fashion-MNIST on an H200, B = 2M gave 63.1 % in 85 s against 51.8 % at
    # B = 100k in 13 s (fp32); bf16 autocast is the usual inference/training precision on recent GPUs
    "cuda": DeviceDefaults(((256, 2_000_000), (1024, 2_000_000), (math.inf, 262_144)), ((256, 5), (math.inf, 8)), "bf16"),
}


def prior_images(run, opts: DpdfdOptions, spec, rows: Optional[int] = None) -> int:
    """Fixed prior images whose views are queried (data-free per-image targets); 0 for one target per prior sample.
    Above 28×28-sized inputs the count follows the ``rows`` B of the release (DATA_FREE_PER_IMAGE_BATCH where B is
    not known yet): LARGE_INPUT_VIEWS_PER_IMAGE views each."""
    if opts.prior_images is not None:
        return opts.prior_images
    if opts.generator == GAN_QUERIES:
        return 0  # the GAN's samples are the query images (gan_images)
    values = spec.channels * spec.height * spec.width
    if run.public_data or opts.generator or opts.public_targets == "rows" or values <= 256:
        return 0
    if values <= 1024:
        return DEFAULT_PRIOR_IMAGES
    if values > LARGE_INPUT_MOST_VALUES:
        return 0
    return max(LARGE_INPUT_MIN_IMAGES, (rows or DATA_FREE_PER_IMAGE_BATCH) // LARGE_INPUT_VIEWS_PER_IMAGE)


def public_targets(run, opts: DpdfdOptions, spec) -> str:
    """What the student learns from: as given, else per-image for public images, fixed prior images without a
    generator or DP-critic GAN samples, else rows."""
    if opts.public_targets is not None:
        return opts.public_targets
    if opts.generator == GAN_QUERIES:
        return "per-image"
    return "per-image" if not opts.generator and (run.public_data or prior_images(run, opts, spec)) else "rows"


def gan_images(opts: DpdfdOptions) -> int:
    """`generator` dpgan: how many fixed GAN samples are queried (as views, targets averaged per image)."""
    return opts.prior_images or DEFAULT_GAN_IMAGES


def data_free_images(run, opts: DpdfdOptions, spec) -> int:
    """Fixed prior images whose per-image targets the student learns from in a data-free run (no public images, no
    DP-critic GAN); 0 when the targets are something else."""
    if run.public_data or opts.generator == GAN_QUERIES or public_targets(run, opts, spec) != "per-image":
        return 0
    return prior_images(run, opts, spec)


def per_image_batch(run, opts: DpdfdOptions, spec) -> int:
    """Rows per release for per-image targets: DATA_FREE_PER_IMAGE_BATCH for data-free prior images, else PER_IMAGE_BATCH."""
    return DATA_FREE_PER_IMAGE_BATCH if data_free_images(run, opts, spec) else PER_IMAGE_BATCH


def time_budget_minutes(run, opts: DpdfdOptions, spec, distributed: bool = False) -> Optional[float]:
    """Minutes B is sized to: `time_budget` as given, else DEFAULT_TIME_BUDGET_MINUTES for data-free prior images on CPU
    in one process (the measured recipe); None where B is given or follows the input size."""
    if opts.batch_size is not None:
        return None
    if opts.time_budget is not None:
        if public_targets(run, opts, spec) != "per-image":
            raise DpconvertError("`time_budget` sizes the rows of per-image targets", fix="give `batch_size` instead", param="time_budget")
        if distributed:
            raise DpconvertError("`time_budget` times the teacher in one process", fix="give `batch_size` under torchrun", param="time_budget")
        if opts.generator == GAN_QUERIES:  # the GAN is trained after B is fixed: its samples cannot be timed first
            raise DpconvertError("`time_budget` times the data-free prior's or public images' views", fix="give `batch_size` with "
                                 "`generator` dpgan", param="time_budget")
        return opts.time_budget
    default = data_free_images(run, opts, spec) and device_kind(run.device) == "cpu" and not distributed
    return DEFAULT_TIME_BUDGET_MINUTES if default else None


def rows_for_budget(estimate: dict, minutes: float, batch_size: int, most: Optional[int] = None, also_rows: int = 0) -> int:
    """B that the timed phases of ``estimate`` (``mechanisms/dpdfd.Dpdfd.estimate``, made for ``batch_size`` rows) fit
    into ``minutes`` beside ``also_rows`` other answers (the prior trial's): queries and teacher grow with B, the
    student's passes over per-image targets do not. The largest step of BUDGET_ROWS_GRID that fits (and is at most
    ``most``: memory), its first step where none does."""
    fits = [rows for rows in BUDGET_ROWS_GRID if budget_fits(estimate, minutes, batch_size, rows + also_rows) and rows <= (most or rows)]
    return max(fits, default=BUDGET_ROWS_GRID[0])


def budget_fits(estimate: dict, minutes: float, batch_size: int, rows: int) -> bool:
    """Whether ``rows`` answers and the student fit BUDGET_SHARE of ``minutes`` at the speed ``estimate`` timed."""
    per_row = (estimate["queries_seconds"] + estimate["teacher_seconds"]) / batch_size
    return rows * per_row <= BUDGET_SHARE * 60 * minutes - estimate["student_seconds"]


def shrinks_to_student(run, opts: DpdfdOptions, spec) -> bool:
    """`shrink_to_student` as given, else on for data-free prior images (the measured recipe), off otherwise."""
    return opts.shrink_to_student if opts.shrink_to_student is not None else bool(data_free_images(run, opts, spec))


def draw_prior_images(run, opts: DpdfdOptions, spec, n: int):
    """n images drawn once from the data-free prior, from the seed (not the query stream): nobody's data."""
    import torch

    from dpconvert.generators import create_generator, default_prior_name

    base = create_generator(opts.prior or default_prior_name(spec), spec)
    z = torch.randn(n, base.nz, generator=stream("prior_images", run.seed))
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
            "released targets averaged per image — data-free")


def release_rows_that_fit(spec, query_floats: int) -> Optional[int]:
    """The most rows one release may hold in half this machine's memory: its B queries (``query_floats`` each: the
    image, or the z it is rendered from) and its B×K rows at a few stages (the student's logits beside the rows, the
    noised rows, the targets) at once. None where the memory cannot be read (no bound to state)."""
    import os

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    return max(1, int(memory / 2 / (4 * (query_floats + 4 * spec.num_classes))))  # float32


def check_release_memory(batch_size: int, spec, query_floats: int) -> None:
    """A batch size that cannot fit in this machine's memory is a one-line error from the plan, before anything is drawn."""
    fit = release_rows_that_fit(spec, query_floats)
    if fit is not None and batch_size > fit:
        need = 4 * batch_size * (query_floats + 4 * spec.num_classes)
        raise DpconvertError(f"`batch_size` {batch_size:,}: one release holds ≈ {need / 2**30:,.0f} GiB of queries and rows, more than half "
                             "this machine's memory", fix=f"give `batch_size` {fit:,} or less (ε does not depend on it)", param="batch_size")


def device_kind(device: str) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def default_batch_size(spec, device: str = "cpu") -> int:
    """Rows per release: ε does not depend on it; the student's signal-to-noise grows with √B."""
    values = spec.channels * spec.height * spec.width
    return next(rows for most, rows in DEVICE_DEFAULTS[device_kind(device)].batch_sizes if values <= most)


def default_epochs(spec, device: str = "cpu") -> int:
    """Student passes over the released pairs, by input size (DEVICE_DEFAULTS): 8 on 28×28 beat 4 with the cosine
    schedule; on 8×8 digits 2 passes over 2.5× the rows beat 5 (benchmarks/RESULTS.md, table 1)."""
    values = spec.channels * spec.height * spec.width
    return next(epochs for most, epochs in DEVICE_DEFAULTS[device_kind(device)].epochs if values <= most)


def default_student_lr(spec) -> float:
    """Peak of the cosine schedule. The student's accuracy on 8×8 digits follows the optimiser steps it gets: 4e-3
    reaches with 5 epochs what 2e-3 reached with 6 (94.7 / 95.5 / 93.4 % vs 93.4 % on all 1 797 digits)."""
    return 4e-3 if _small(spec) else 2e-3


def engine_option_settings(opts: "DpdfdOptions", spec, device: str = "cpu", run=None) -> dict:
    """The engine's settings (``distill/config.DpdfdConfig``) that the user's options set, resolved for this teacher,
    device and ``run`` (its query sources; without one — tests, the design simulation — `shrink_to_student` is taken as
    given): the options class holds their one default (the plan may still raise B for per-image targets)."""
    shrink = shrinks_to_student(run, opts, spec) if run is not None else bool(opts.shrink_to_student)
    return dict(releases=opts.releases, batch_size=opts.batch_size or default_batch_size(spec, device), clip=opts.clip,
                distill_loss=opts.distill_loss, logit_adjust=opts.logit_adjust, student_lr=opts.student_lr or default_student_lr(spec),
                prior_pool=opts.prior_pool, new_sources_per_release=opts.new_sources_per_release, shrink_to_student=shrink)


def default_student_samples(run, opts: DpdfdOptions, spec, num_bases: int) -> Optional[int]:
    """Views the student trains on over per-image targets: `epochs` passes over the images, else
    LARGE_INPUT_STUDENT_SAMPLES for data-free prior images above 28×28-sized inputs, else None (the engine's own)."""
    if opts.epochs:
        return opts.epochs * num_bases
    return LARGE_INPUT_STUDENT_SAMPLES if data_free_images(run, opts, spec) and spec.channels * spec.height * spec.width > 1024 else None


def default_minibatch(spec) -> int:
    return RELEASE_ROWS_DEFAULT if spec.channels * spec.height * spec.width <= 3 * 32 * 32 else LARGE_INPUT_MINIBATCH


def _small(spec) -> bool:
    return spec.channels * spec.height * spec.width <= 256


def check_prior_name(name: str) -> str:
    from dpconvert.generators import PRIORS

    if name not in PRIORS:
        raise OptionError(f"unknown `prior` {name!r}", fix=f"choose one of: {', '.join(PRIORS)}", param="prior")
    return name


def distinct_answers_warning(delta: float, answers: int) -> Optional[str]:
    """δ is the chance the guarantee fails outright; with more protected answers than 1/δ it is weak."""
    if delta * answers <= 1:
        return None
    return (f"δ={delta:g} is larger than 1/(B·T) = 1/{answers} for the {answers} protected teacher answers; "
            f"use `delta` {10.0 ** -math.ceil(math.log10(answers)):g} or smaller")
