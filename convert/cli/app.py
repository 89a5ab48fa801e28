"""The ``dpconvert`` command line: one Typer app that parses options, calls the Python API and prints.

Options left out are passed as ``None`` and the library fills in its defaults (``options.py``,
``methods/*.py``). Library errors name parameters in backticks (`batch_size`); ``main`` turns them into this CLI's
flags (``--batch-size``). Heavy imports (torch, timm, onnx) happen inside commands so ``dpconvert --help`` is
instant. Every ``DpconvertError`` becomes one red line and exit code 1; usage errors exit 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from dpconvert.errors import DpconvertError
from dpconvert.methods.adlm import AdlmOptions
from dpconvert.methods.dpdfd_options import DpdfdOptions
from dpconvert.methods.dpgan import GanOptions
from dpconvert.methods.dpsgd import DpsgdOptions
from dpconvert.methods.pknn_options import PknnOptions
from dpconvert.accounting.statements import DELTA_CEILING
from dpconvert.options import DEFAULT_DELTA, DEFAULT_EPS
from dpconvert.version import __version__

from .console import err, out, setup_logging
from .flags import as_flags

def _no_type_on_flags() -> None:
    """Typer's help prints a type for every option, ``<bool>`` on flags too, which reads as if a value were expected;
    a flag's type is its presence, so it shows none."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_dpconvert", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich._dpconvert = True
    TyperOption.display_type_rich = display_type_rich


_no_type_on_flags()

app = typer.Typer(
    name="dpconvert",
    help="Convert a sensitive image classifier into a differentially private student, with a privacy card.\n\n"
    "Main form: dpconvert TEACHER --eps 1 --out student.onnx (TEACHER: a file, timm:NAME or builtin:digits).",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,  # locals may hold private data
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
)
card_app = typer.Typer(help="Show, verify or sign one privacy card; make signing keys.", no_args_is_help=True)
app.add_typer(card_app, name="card")

TEACHER, PRIVACY, DPDFD, PKNN, DATA, OUTPUT = "Teacher", "Privacy", "DPDFD (data-free, query-level)", "Private-kNN (record-level)", "Data", "Output"
DPSGD, ADLM = "DP-SGD (record-level, private labels)", "AdLM (record-level, pure ε-DP, private labels)"
P, D, S, A, G = PknnOptions(), DpdfdOptions(), DpsgdOptions(), AdlmOptions(), GanOptions()

# ------------------------------------------------------------------ shared options
Arch = Annotated[Optional[str], typer.Option("--arch", help="Architecture for weights-only files: timm:NAME (or NAME) or a registered one (e.g. datalens_cnn). Default: recognised from the weights' keys and shapes for common timm families.", rich_help_panel=TEACHER)]
NumClasses = Annotated[Optional[int], typer.Option("--num-classes", help="Number of classes (when the source does not say).", rich_help_panel=TEACHER)]
InChans = Annotated[Optional[int], typer.Option("--in-chans", help="Input channels (e.g. 1 for grayscale timm models).", rich_help_panel=TEACHER)]
InputSize = Annotated[Optional[str], typer.Option("--input-size", help="Input size C,H,W (e.g. 1,28,28).", rich_help_panel=TEACHER)]
Mean = Annotated[Optional[str], typer.Option("--mean", help="Per-channel input mean, comma-separated.", rich_help_panel=TEACHER)]
Std = Annotated[Optional[str], typer.Option("--std", help="Per-channel input std, comma-separated.", rich_help_panel=TEACHER)]
Weights = Annotated[Optional[Path], typer.Option("--weights", help="Local weights file for timm:NAME (works offline).", rich_help_panel=TEACHER)]
TrustPickle = Annotated[bool, typer.Option("--trust-pickle", help="Allow unpickling a whole nn.Module. Unpickling runs code from the file: only for files you trust.", rich_help_panel=TEACHER)]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda or auto.", rich_help_panel=TEACHER)]
ClassNames = Annotated[Optional[str], typer.Option("--class-names", help="The class list in label order, comma-separated or a file with one name per line: needed for ImageFolders whose class folders have names (cat, dog) instead of 0..K-1. Public by your statement; on the card.", rich_help_panel="Data")]

def _load_options(arch, num_classes, in_chans, input_size, mean, std, weights, trust_pickle, device="cpu"):
    from dpconvert.io.spec import parse_floats, parse_size
    from dpconvert.io.teachers import LoadOptions
    from dpconvert.options import resolve_device

    return LoadOptions(arch=arch, num_classes=num_classes, in_chans=in_chans, input_size=parse_size(input_size) if input_size else None,
                       mean=parse_floats(mean, "--mean") if mean else None, std=parse_floats(std, "--std") if std else None,
                       weights=str(weights) if weights else None, trust_pickle=trust_pickle, device=resolve_device(device))


def _class_names(value: Optional[str]):
    from dpconvert.io.data import parse_class_names

    return None if value is None else parse_class_names(value)


def _given(**values) -> dict:
    """Only the options the user gave: the library owns the defaults."""
    return {k: v for k, v in values.items() if v is not None}


def _version_callback(value: bool) -> None:
    if value:
        out.print(f"dpconvert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More log lines.")] = False,
) -> None:
    setup_logging(verbose)


# ------------------------------------------------------------------ inspect
@app.command()
def inspect(
    teacher: Annotated[str, typer.Argument(help="Teacher: a file (.pt/.pth/.pt2/.safetensors/.onnx), timm:NAME or builtin:NAME.")],
    arch: Arch = None, num_classes: NumClasses = None, in_chans: InChans = None, input_size: InputSize = None, mean: Mean = None,
    std: Std = None, weights: Weights = None, trust_pickle: TrustPickle = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (keys documented in the README).")] = False,
) -> None:
    """Load a teacher and print what was loaded (source kind, architecture, input spec, sha256)."""
    from rich.table import Table

    from dpconvert.io.teachers import load_teacher

    t = load_teacher(teacher, _load_options(arch, num_classes, in_chans, input_size, mean, std, weights, trust_pickle))
    if as_json:
        print(json.dumps(t.info(), indent=2))
        return
    table = Table(title=f"teacher {teacher}", show_header=False)
    s = t.spec
    for k, v in [("source kind", t.kind), ("architecture", str(t.arch)),
                 ("parameters", f"{t.num_params:,}" if t.num_params is not None else "n/a (black box)"),
                 ("input", f"{s.channels}x{s.height}x{s.width}  mean={list(s.mean)} std={list(s.std)}"), ("classes", str(s.num_classes)),
                 ("sha256", str(t.sha256)), ("description", t.description)]:
        table.add_row(k, v)
    out.print(table)
    for w in t.warnings:
        err.print(f"warning: {w}", style="yellow")


# ------------------------------------------------------------------ plan
@app.command()
def plan(
    method: Annotated[str, typer.Option("--method", help="dpdfd, pknn, dpsgd or adlm: planned by the same code convert runs.")] = "dpdfd",
    eps: Annotated[Optional[float], typer.Option("--eps", help="Target ε (calibrates the noise).")] = None,
    delta: Annotated[Optional[float], typer.Option("--delta", help=f"Target δ (default: DPDFD ≤ 1/(B·T), the protected answers; else {DEFAULT_DELTA:g}).")] = None,
    n: Annotated[Optional[int], typer.Option("--n", help="Private set size, if known (checks δ ≤ 1/n).")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", "--releases", help=f"DPDFD: number of noisy releases T (default {D.releases}, as convert).")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="DPDFD: rows per release B (default: convert's for --input-size; only the record-level bound and the default δ depend on it).")] = None,
    input_size: Annotated[str, typer.Option("--input-size", help="DPDFD: the teacher's input size C,H,W (convert's defaults for B follow from it).")] = "1,28,28",
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="DPDFD: use this σ and compute ε instead of calibrating.")] = None,
    accounting: Annotated[Optional[str], typer.Option("--accounting", help="DPDFD: per-answer (default; no input answered twice: the ε of one release for any --steps) or composed.")] = None,
    k: Annotated[Optional[int], typer.Option("--k", help=f"Private-kNN: neighbours (default {P.k}).")] = None,
    sampling_rate: Annotated[Optional[float], typer.Option("--sampling-rate", help=f"Private-kNN: Poisson sampling rate γ (default {P.sampling_rate}); DP-SGD: lot rate q (default {S.sampling_rate}).")] = None,
    sigma1: Annotated[Optional[float], typer.Option("--sigma1", help=f"Private-kNN: screening noise σ1 (default {P.sigma1}).")] = None,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help=f"Private-kNN: screening threshold (default {P.threshold_ratio}·k).")] = None,
    sigma2: Annotated[Optional[float], typer.Option("--sigma2", help="Private-kNN: argmax noise (default: calibrated to --eps).")] = None,
    num_classes: Annotated[int, typer.Option("--num-classes", help="Private-kNN: classes.")] = 10,
    queries: Annotated[Optional[int], typer.Option("--queries", help="Private-kNN: queries screened (with --public-data: the number of public images; default as convert: 5000 from a query generator).")] = None,
    query_generator: Annotated[Optional[str], typer.Option("--query-generator", help="Private-kNN: prior or dpgan (planned with the GAN's events, as convert).")] = None,
    generator_eps: Annotated[Optional[float], typer.Option("--generator-eps", help="Private-kNN with --query-generator dpgan: the GAN's share of ε (default half).")] = None,
    answered: Annotated[Optional[int], typer.Option("--answered", help="Private-kNN: queries answered (default: all).")] = None,
    epochs: Annotated[Optional[int], typer.Option("--epochs", help=f"DP-SGD: epochs of ⌊1/q⌋ steps (default {S.epochs}).")] = None,
    clip: Annotated[Optional[float], typer.Option("--clip", help=f"DP-SGD: per-example gradient norm bound (default {S.clip:g}).")] = None,
    sigma: Annotated[Optional[float], typer.Option("--sigma", help="DP-SGD: use this noise multiplier and compute ε.")] = None,
    count_sigma: Annotated[Optional[float], typer.Option("--count-sigma", help=f"DP-SGD: noise of the record count (default {S.count_sigma:g}).")] = None,
    relevance_share: Annotated[Optional[float], typer.Option("--relevance-share", help=f"AdLM: ε₁/ε for the relevance release (default {A.relevance_share:g}).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Plan a privacy budget: the noise for a target ε, and ε by each accountant (DPDFD: what convert runs by default)."""
    from dpconvert.api import plan as make_plan
    from dpconvert.io.spec import parse_size

    from .render import print_plan

    result = make_plan(method, eps=eps, delta=delta, n=n, noise_multiplier=noise_multiplier, num_classes=num_classes, queries=queries,
                       answered=answered, input_size=parse_size(input_size),
                       **_given(releases=steps, batch_size=batch_size, accounting=accounting, k=k, sampling_rate=sampling_rate, sigma1=sigma1,
                                threshold=threshold, sigma2=sigma2, epochs=epochs, clip=clip, sigma=sigma, count_sigma=count_sigma,
                                query_generator=query_generator, generator_eps=generator_eps, relevance_share=relevance_share))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print_plan(result)


# ------------------------------------------------------------------ convert (the main job)
@app.command()
def convert(
    teacher: Annotated[str, typer.Argument(help="Teacher: a file (.pt/.pth/.pt2/.safetensors/.onnx), timm:NAME or builtin:digits.")],
    arch: Arch = None, num_classes: NumClasses = None, in_chans: InChans = None, input_size: InputSize = None,
    mean: Mean = None, std: Std = None, weights: Weights = None, trust_pickle: TrustPickle = False, device: Device = "cpu",
    teacher_card: Annotated[Optional[Path], typer.Option("--teacher-card", help="The teacher's own dpconvert privacy card (default: the one embedded in an ONNX teacher). When it verifies (record-level, ε recomputed, weights match, secret noise; signed by a key in --trusted-keys when given), the student's card carries the teacher's record-level guarantee too.", rich_help_panel=TEACHER)] = None,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="Public keys (a folder of *.pub) a teacher card's signature must verify against.", rich_help_panel=TEACHER)] = None,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Output student, an .onnx file; the card goes to OUT.card.json / OUT.card.md.", rich_help_panel=OUTPUT)] = Path("student.onnx"),
    force: Annotated[bool, typer.Option("--force", help="Replace OUT (and its cards, a --save-generator file) if they exist.", rich_help_panel=OUTPUT)] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the card as JSON at the end instead of the summary table.", rich_help_panel=OUTPUT)] = False,
    profile: Annotated[bool, typer.Option("--profile", help="Add throughput (teacher queries/s, student samples/s, …) to the summary; the time per phase is shown and on the card's run block unless private data was read.", rich_help_panel=OUTPUT)] = False,
    show_timings: Annotated[bool, typer.Option("--show-timings", help="With private data, show the time per phase and the elapsed time anyway: they grow with the private set's size, so keep such output out of public logs. Never written to the card.", rich_help_panel=OUTPUT)] = False,
    sign_key: Annotated[Optional[Path], typer.Option("--sign-key", help="Sign the card with this Ed25519 private key (dpconvert card keygen); audit --trusted-keys checks it.", rich_help_panel=OUTPUT)] = None,
    method: Annotated[str, typer.Option("--method", help="dpdfd (data-free, query-level), pknn, dpsgd or adlm (record-level, need --private-data) or auto.", rich_help_panel=PRIVACY)] = "auto",
    eps: Annotated[Optional[float], typer.Option("--eps", help=f"Target ε; the noise is calibrated to it (default {DEFAULT_EPS:g} unless --noise-multiplier).", rich_help_panel=PRIVACY)] = None,
    delta: Annotated[Optional[float], typer.Option("--delta", help=f"Target δ (default: DPDFD ≤ 1/(B·T), one over the protected teacher answers; other methods {DEFAULT_DELTA:g}). At most {DELTA_CEILING:g} unless --allow-large-delta.", rich_help_panel=PRIVACY)] = None,
    allow_large_delta: Annotated[bool, typer.Option("--allow-large-delta", help=f"Accept a δ above {DELTA_CEILING:g} (the card warns; audit fails it unless --max-delta admits it).", rich_help_panel=PRIVACY)] = False,
    no_privacy: Annotated[bool, typer.Option("--no-privacy", help="DPDFD without noise (ε = ∞): a non-private student for comparison only; its card says so and every audit fails it. --eps inf and --noise-multiplier 0 need it.", rich_help_panel=PRIVACY)] = False,
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="DPDFD: use this σ instead of calibrating; ε is computed and printed.", rich_help_panel=PRIVACY)] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for everything but the DP noise (queries, student, training order); the noise is secret unless --seeded-noise.", rich_help_panel=PRIVACY)] = 0,
    seeded_noise: Annotated[bool, typer.Option("--seeded-noise", help="For tests and benchmarks only: draw the DP noise and subsamples from --seed (reproducible, NOT secret: anyone with the card can regenerate the noise; the card says so and audit fails it unless --allow-seeded-noise).", rich_help_panel=PRIVACY)] = False,
    student: Annotated[Optional[str], typer.Option("--student", help="Student architecture: a registered name or timm:NAME (default from the input size).", rich_help_panel=OUTPUT)] = None,
    eval_data: Annotated[Optional[str], typer.Option("--eval-data", help="Labelled data to report accuracy on (not covered by the guarantee).", rich_help_panel=DATA)] = None,
    private_data: Annotated[Optional[str], typer.Option("--private-data", help="The labelled private training data (any reader): record-level methods.", rich_help_panel=DATA)] = None,
    public_data: Annotated[Optional[str], typer.Option("--public-data", help="Unlabelled public images used as queries (Private-kNN: labelled by the private data; DPDFD: replaces the data-free prior, marked on the card).", rich_help_panel=DATA)] = None,
    pixel_range: Annotated[Optional[float], typer.Option("--pixel-range", help="Maximum pixel value of data stored as float or wide integers (e.g. 255); default: uint8 is 0..255, float must be in [0, 1]. Never inferred from the data.", rich_help_panel=DATA)] = None,
    class_names: ClassNames = None,
    steps: Annotated[Optional[int], typer.Option("--steps", "--releases", help=f"Noisy releases T (ε depends on σ and T only; default {D.releases}).", rich_help_panel=DPDFD)] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Rows per release B (default from the input size; free for the query-level ε).", rich_help_panel=DPDFD)] = None,
    clip: Annotated[Optional[float], typer.Option("--clip", help=f"Row norm C of the normalised output gradients (default {D.clip:g}); DP-SGD: per-example gradient norm bound (default {S.clip:g}).", rich_help_panel=DPDFD)] = None,
    epochs: Annotated[Optional[int], typer.Option("--epochs", help=f"Student epochs: DPDFD passes over the released pairs after each release (default from the input size; with --public-targets per-image, passes over the images, default 400 000 views in all); Private-kNN epochs per round (default {P.epochs}); DP-SGD epochs, ⌊1/q⌋ noisy steps each (default {S.epochs}).", rich_help_panel=DPDFD)] = None,
    distill_loss: Annotated[Optional[str], typer.Option("--distill-loss", help="DPDFD's L_T: logits (default: centred logit matching, the whole class ranking per query), ce (the paper's: teacher argmax only) or kd.", rich_help_panel=DPDFD)] = None,
    generator: Annotated[Optional[str], typer.Option("--generator", help="A learned generator mixed with the data-free prior (e.g. dafl); default: the prior only.", rich_help_panel=DPDFD)] = None,
    prior: Annotated[Optional[str], typer.Option("--prior", help="The data-free query prior: random_fields (smooth blobs and strokes) or centred_fields (the same inside a centred ellipse). Default: from the input size for DPDFD, random_fields for Private-kNN's prior queries.", rich_help_panel=DPDFD)] = None,
    public_targets: Annotated[Optional[str], typer.Option("--public-targets", help="DPDFD with --public-data: per-image (default: the views' targets averaged per image and denoised, B defaults to 1 000 000; measured better at ε = 1 on in- and out-of-domain images) or rows (one noisy target per view of an image; better without noise).", rich_help_panel=DPDFD)] = None,
    prior_images: Annotated[Optional[int], typer.Option("--prior-images", help="Data-free per-image targets: draw N fixed images from the prior and query views of each many times, so their targets can be averaged (B defaults to 1 000 000). Default 2500 for 28×28-sized inputs (Fashion-MNIST, ε = 1: 66.0–66.2 % on 3 seeds against 56.5 % for one target per prior sample), else 0; 0 turns it off. With --public-data, N prior images are queried beside the public ones (a mixture; only the public images count towards the per-image ε).", rich_help_panel=DPDFD)] = None,
    accounting: Annotated[Optional[str], typer.Option("--accounting", help="DPDFD: per-answer (default: the engine never answers an input twice, so the query-level ε is one release's for any --steps) or composed (the releases compose).", rich_help_panel=DPDFD)] = None,
    amp: Annotated[Optional[str], typer.Option("--amp", help="DPDFD: bf16 (teacher and student forward under bf16 autocast; the release stays fp32) or off. Default: bf16 on CUDA, off on CPU.", rich_help_panel=DPDFD)] = None,
    save_generator: Annotated[Optional[str], typer.Option("--save-generator", help="Save the learned generator and its DPDFD cost to FILE.safetensors (DPDFD with --generator; Private-kNN with --query-generator train).", rich_help_panel=DPDFD)] = None,
    k: Annotated[Optional[int], typer.Option("--k", help=f"Neighbours (default {P.k}).", rich_help_panel=PKNN)] = None,
    sampling_rate: Annotated[Optional[float], typer.Option("--sampling-rate", help=f"Poisson sampling rate γ (default {P.sampling_rate}); DP-SGD: lot sampling rate q (default {S.sampling_rate}).", rich_help_panel=PKNN)] = None,
    sigma1: Annotated[Optional[float], typer.Option("--sigma1", help=f"Screening noise σ1 (default {P.sigma1:g}).", rich_help_panel=PKNN)] = None,
    threshold: Annotated[Optional[float], typer.Option("--threshold", help=f"Screening threshold (default {P.threshold_ratio}·k).", rich_help_panel=PKNN)] = None,
    sigma2: Annotated[Optional[float], typer.Option("--sigma2", help="Argmax noise (default: calibrated to --eps).", rich_help_panel=PKNN)] = None,
    rounds: Annotated[Optional[int], typer.Option("--rounds", help=f"Rounds; the student's features refine the kNN space (default {P.rounds}).", rich_help_panel=PKNN)] = None,
    queries: Annotated[Optional[int], typer.Option("--queries", help="Queries over all rounds (default: every public image, or 5000 from a generator or the prior).", rich_help_panel=PKNN)] = None,
    features: Annotated[Optional[str], typer.Option("--features", help="First-round features: hog_pca (default), hog, or timm:NAME[@FILE] (a public pretrained backbone; FILE = local weights).", rich_help_panel=PKNN)] = None,
    labels: Annotated[Optional[str], typer.Option("--labels", help="Student targets from the released noisy vote histogram: soft (default, tempered softmax) or hard (argmax). Same ε.", rich_help_panel=PKNN)] = None,
    knn: Annotated[Optional[str], typer.Option("--knn", help="kNN search: exact (torch), faiss (optional extra, for ≥1M records) or auto (default).", rich_help_panel=PKNN)] = None,
    canaries: Annotated[Optional[int], typer.Option("--canaries", help="One-run canary audit with N canaries (empirical ε lower bound on the card).", rich_help_panel=PKNN)] = None,
    query_generator: Annotated[Optional[str], typer.Option("--query-generator", help="Queries from a generator FILE saved with --save-generator (its cost is composed in), 'train' (DPDFD trains one in this run), 'dpgan' (a GAN with a DP critic trained on --private-data in this run: record-level) or 'prior' (data-independent).", rich_help_panel=PKNN)] = None,
    generator_eps: Annotated[Optional[float], typer.Option("--generator-eps", help="With --query-generator train or dpgan: the generator's share of --eps (default half); the rest labels the queries.", rich_help_panel=PKNN)] = None,
    gan_critic: Annotated[Optional[str], typer.Option("--gan-critic", help="--query-generator dpgan: 'embedding' (one noisy kernel mean-embedding release; default) or 'dpsgd' (a convolutional critic trained with DP-SGD).", rich_help_panel=PKNN)] = None,
    gan_steps: Annotated[Optional[int], typer.Option("--gan-steps", help=f"--query-generator dpgan, --gan-critic dpsgd: DP critic steps (default {P.gan_steps}).", rich_help_panel=PKNN)] = None,
    gan_sampling_rate: Annotated[Optional[float], typer.Option("--gan-sampling-rate", help=f"--query-generator dpgan, --gan-critic dpsgd: Poisson rate of the critic's lots (default {P.gan_sampling_rate:g}).", rich_help_panel=PKNN)] = None,
    gan_generator_steps: Annotated[Optional[int], typer.Option("--gan-generator-steps", help=f"--query-generator dpgan, --gan-critic embedding: generator steps against the release (default {P.gan_generator_steps}).", rich_help_panel=PKNN)] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", help=f"Learning rate of SGD on the noisy gradients (default {S.lr:g}).", rich_help_panel=DPSGD)] = None,
    momentum: Annotated[Optional[float], typer.Option("--momentum", help=f"SGD momentum (default {S.momentum:g}).", rich_help_panel=DPSGD)] = None,
    sigma: Annotated[Optional[float], typer.Option("--sigma", help="Noise multiplier (default: calibrated to --eps); ε is computed and must not exceed --eps.", rich_help_panel=DPSGD)] = None,
    count_sigma: Annotated[Optional[float], typer.Option("--count-sigma", help=f"Noise std of the record count that scales the learning rate (default {S.count_sigma:g}; counted in ε).", rich_help_panel=DPSGD)] = None,
    relevance_share: Annotated[Optional[float], typer.Option("--relevance-share", help=f"Share of --eps for the private relevance release (default {A.relevance_share:g}).", rich_help_panel=ADLM)] = None,
    relevance_power: Annotated[Optional[float], typer.Option("--relevance-power", help=f"Noise redistribution: weight ∝ relevance^power (default {A.relevance_power:g}; 0 = uniform).", rich_help_panel=ADLM)] = None,
    pool: Annotated[Optional[int], typer.Option("--pool", help=f"ScatterNet coefficients pooled to pool×pool per channel (default {A.pool}).", rich_help_panel=ADLM)] = None,
) -> None:
    """Convert TEACHER into a DP student (DPDFD, Private-kNN, DP-SGD or AdLM) with an ONNX export and a privacy card."""
    import shlex

    from dpconvert.api import convert as run_convert

    from .console import err as err_console
    from .render import ProgressReporter, print_summary

    method_options = _given(releases=steps, batch_size=batch_size, clip=clip, epochs=epochs, distill_loss=distill_loss, generator=generator,
                            prior=prior, save_generator=save_generator, public_targets=public_targets, prior_images=prior_images, amp=amp, accounting=accounting, k=k, sampling_rate=sampling_rate, sigma1=sigma1, threshold=threshold,
                            sigma2=sigma2, rounds=rounds, queries=queries, features=features, labels=labels, knn=knn, canaries=canaries,
                            query_generator=query_generator, generator_eps=generator_eps, lr=lr, momentum=momentum, sigma=sigma,
                            count_sigma=count_sigma, relevance_share=relevance_share, relevance_power=relevance_power, pool=pool,
                            gan_critic=gan_critic, gan_steps=gan_steps, gan_sampling_rate=gan_sampling_rate, gan_generator_steps=gan_generator_steps)
    show_time = show_timings or private_data is None  # a run on private data shows no durations unless asked (--show-timings)
    reporter = ProgressReporter(steps or D.releases, err_console if as_json else out, show_time)  # stdout carries only the card under --json
    try:
        result = run_convert(
            teacher, out=out_path, method=method, eps=eps, delta=delta, noise_multiplier=noise_multiplier, seed=seed, device=device,
            student=student, eval_data=eval_data, private_data=private_data, public_data=public_data, pixel_range=pixel_range,
            seeded_noise=seeded_noise, sign_key=sign_key, allow_large_delta=allow_large_delta, class_names=_class_names(class_names),
            no_privacy=no_privacy, force=force, teacher_card=teacher_card, trusted_keys=trusted_keys, command="dpconvert " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            loader=_load_options(arch, num_classes, in_chans, input_size, mean, std, weights, trust_pickle, device),
            on_plan=reporter.plan, on_progress=reporter.tick, **method_options)
    finally:
        reporter.close()
    if result is None:  # a torchrun rank other than 0: rank 0 writes and reports
        return
    if as_json:
        print(result.card.to_json())
        return
    print_summary(result, throughput=profile, show_timings=show_timings)


@app.command()
def synth(
    private_data: Annotated[str, typer.Option("--private-data", help="The labelled private training data (any reader).", rich_help_panel=DATA)],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="The synthetic data set, an .npz (x: uint8 N×C×H×W, y); its card goes to OUT.card.json.", rich_help_panel=OUTPUT)],
    input_size: Annotated[str, typer.Option("--input-size", help="Image size C,H,W of the data set (declared: never read from the data).", rich_help_panel=DATA)],
    num_classes: Annotated[int, typer.Option("--num-classes", help="Number of classes (declared: never read from the data).", rich_help_panel=DATA)],
    eps: Annotated[float, typer.Option("--eps", help="Target ε of the whole release (the DP critic's).", rich_help_panel=PRIVACY)] = DEFAULT_EPS,
    delta: Annotated[float, typer.Option("--delta", help=f"Target δ. At most {DELTA_CEILING:g} unless --allow-large-delta.", rich_help_panel=PRIVACY)] = DEFAULT_DELTA,
    allow_large_delta: Annotated[bool, typer.Option("--allow-large-delta", help=f"Accept a δ above {DELTA_CEILING:g} (the card warns; audit fails it unless --max-delta admits it).", rich_help_panel=PRIVACY)] = False,
    samples: Annotated[int, typer.Option("--samples", help="Synthetic images to write (class-balanced).", rich_help_panel=OUTPUT)] = 10000,
    grid: Annotated[Optional[Path], typer.Option("--grid", help="Also write a PNG grid of samples, one row per class.", rich_help_panel=OUTPUT)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace OUT (and its card, the grid) if they exist.", rich_help_panel=OUTPUT)] = False,
    gan_critic: Annotated[Optional[str], typer.Option("--gan-critic", help="'embedding' (one noisy kernel mean-embedding release; default) or 'dpsgd' (a convolutional critic trained with DP-SGD).", rich_help_panel=PRIVACY)] = None,
    gan_steps: Annotated[Optional[int], typer.Option("--gan-steps", help=f"--gan-critic dpsgd: DP critic steps (default {G.steps}).", rich_help_panel=PRIVACY)] = None,
    gan_sampling_rate: Annotated[Optional[float], typer.Option("--gan-sampling-rate", help=f"--gan-critic dpsgd: Poisson rate of the critic's lots (default {G.sampling_rate:g}).", rich_help_panel=PRIVACY)] = None,
    gan_generator_steps: Annotated[Optional[int], typer.Option("--gan-generator-steps", help=f"--gan-critic embedding: generator steps against the release (post-processing; default {G.generator_steps}).", rich_help_panel=PRIVACY)] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for everything but the DP noise.", rich_help_panel=PRIVACY)] = 0,
    seeded_noise: Annotated[bool, typer.Option("--seeded-noise", help="Tests and benchmarks only: the noise from --seed (NOT secret; the card says so).", rich_help_panel=PRIVACY)] = False,
    pixel_range: Annotated[Optional[float], typer.Option("--pixel-range", help="Maximum pixel value of data stored as float or wide integers.", rich_help_panel=DATA)] = None,
    class_names: ClassNames = None,
    sign_key: Annotated[Optional[Path], typer.Option("--sign-key", help="Sign the data card with this Ed25519 private key (dpconvert card keygen); audit --trusted-keys checks it.", rich_help_panel=OUTPUT)] = None,
) -> None:
    """Release a DP synthetic data set: a GAN with a DP critic trained on --private-data, its samples and a card."""
    import shlex

    from dpconvert.synth import synthesize

    try:
        size = tuple(int(v) for v in input_size.split(","))
        assert len(size) == 3
    except (ValueError, AssertionError):
        raise DpconvertError(f"`input_size` must be C,H,W (e.g. 1,28,28), got {input_size!r}") from None
    card = synthesize(private_data, out=out_path, input_size=size, num_classes=num_classes, eps=eps, delta=delta, allow_large_delta=allow_large_delta,
                      samples=samples, seed=seed,
                      seeded_noise=seeded_noise, pixel_range=pixel_range, grid=grid,
                      gan=GanOptions(**_given(critic=gan_critic, steps=gan_steps, sampling_rate=gan_sampling_rate, generator_steps=gan_generator_steps)),
                      command="dpconvert " + " ".join(shlex.quote(a) for a in sys.argv[1:]), sign_key=sign_key, class_names=_class_names(class_names),
                      force=force,
                      on_progress=lambda i: out.print(f"{i['stage']}: step {i['releases']}/{i['total']}"))
    g = card.data["guarantee"]
    out.print(f"wrote {out_path} ({samples} samples) and {out_path}.card.json: ε={g['epsilon']:.4f}, δ={g['delta']:g}, scope {g['scope']}"
              + (f"; sample grid {grid}" if grid else ""))


# ------------------------------------------------------------------ audit
def _exit_usage(message: str) -> None:
    err.print(f"error: {as_flags(message)}", style="bold red", markup=False)
    raise typer.Exit(2)


MIA = "Membership inference (empirical)"


@app.command()
def audit(
    paths: Annotated[list[str], typer.Argument(help="Model files, *.card.json cards, or directories (zoos) scanned recursively.")],
    max_eps: Annotated[Optional[float], typer.Option("--max-eps", help="Fail models whose ε exceeds this.", rich_help_panel="Policy")] = None,
    max_delta: Annotated[Optional[float], typer.Option("--max-delta", help=f"Fail models whose δ exceeds this (default: the ceiling {DELTA_CEILING:g}).", rich_help_panel="Policy")] = None,
    require_scope: Annotated[Optional[str], typer.Option("--require-scope", help="Require this scope: record or query.", rich_help_panel="Policy")] = None,
    max_record_eps: Annotated[Optional[float], typer.Option("--max-record-eps", help="Fail models whose record-level ε exceeds this.", rich_help_panel="Policy")] = None,
    min_accuracy: Annotated[Optional[float], typer.Option("--min-accuracy", help="Fail models whose card reports lower student accuracy.", rich_help_panel="Policy")] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="Models without a card pass (reported as 'no DP guarantee').", rich_help_panel="Policy")] = False,
    allow_seeded_noise: Annotated[bool, typer.Option("--allow-seeded-noise", help="Let models whose DP noise was seeded (--seeded-noise: reproducible, not secret) pass; by default they fail.", rich_help_panel="Policy")] = False,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="A folder of *.pub Ed25519 keys (or one key): signatures by these keys are verified, others fail.", rich_help_panel="Policy")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature", help="Fail models whose card is not signed by a key in --trusted-keys.", rich_help_panel="Policy")] = False,
    max_per_image_eps: Annotated[Optional[float], typer.Option("--max-per-image-eps", help="Fail DPDFD models on public-image queries whose ε for all the answers about one source image exceeds this.", rich_help_panel="Policy")] = None,
    require_secret_noise: Annotated[bool, typer.Option("--require-secret-noise", hidden=True, help="Kept for old CI configs: secret noise is now always required unless --allow-seeded-noise.")] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the full report as JSON to this file.")] = None,
    markdown_path: Annotated[Optional[Path], typer.Option("--markdown", help="Append the result table as Markdown to this file (e.g. $GITHUB_STEP_SUMMARY).")] = None,
    html_path: Annotated[Optional[Path], typer.Option("--html", help="Write a self-contained HTML report: sortable table, ε-vs-accuracy plot, membership-inference points.")] = None,
    members: Annotated[Optional[str], typer.Option("--members", help="Data the model was trained on (labelled).", rich_help_panel=MIA)] = None,
    non_members: Annotated[Optional[str], typer.Option("--non-members", help="Data it was not trained on (labelled).", rich_help_panel=MIA)] = None,
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="Also attack this teacher, side by side.", rich_help_panel=MIA)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most this many members and non-members.", rich_help_panel=MIA)] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the ROC curves to this PNG.", rich_help_panel=MIA)] = None,
    reference_models: Annotated[int, typer.Option("--reference-models", help="Train N cheap reference students on random halves of members ∪ non-members (LiRA with per-example calibration).", rich_help_panel=MIA)] = 0,
    reference_epochs: Annotated[int, typer.Option("--reference-epochs", help="Epochs per reference student.", rich_help_panel=MIA)] = 3,
    write_card: Annotated[bool, typer.Option("--write-card", help="Record the results in each model's card (audit block, labelled empirical).", rich_help_panel=MIA)] = False,
    arch: Arch = None, num_classes: NumClasses = None, input_size: InputSize = None, mean: Mean = None, std: Std = None,
) -> None:
    """Verify privacy cards, recompute ε and enforce a policy. Exit 0 = all pass, 1 = a failure, 2 = usage error.

    With --members/--non-members, also run membership-inference attacks (empirical evidence, not a guarantee)."""
    from dpconvert.auditing.audit import Policy, audit as run_audit

    from .render import membership_table, print_audit

    from dpconvert.io.atomic import check_output

    try:
        for param, path in (("json", json_path), ("html", html_path), ("markdown", markdown_path)):
            if path is not None:  # a report that cannot be written fails now, not after auditing a zoo
                check_output(path, param=param, force=True)
        policy = Policy(max_eps, max_delta, require_scope, max_record_eps, min_accuracy, allow_missing, allow_seeded_noise, require_signature,
                        str(trusted_keys) if trusted_keys else None, max_per_image_eps)
        results = run_audit(paths, policy)
        if (members is None) != (non_members is None):
            raise DpconvertError("membership inference needs both --members and --non-members")
    except DpconvertError as e:
        _exit_usage(str(e))
    print_audit(results, roots=paths)
    mia = {}
    if members is not None:
        try:
            mia = membership_table(results, members, non_members, teacher, limit, plot,
                                   _load_options(arch, num_classes, None, input_size, mean, std, None, False), reference_models, reference_epochs)
        except DpconvertError as e:
            _exit_usage(str(e))
        if write_card:
            from dpconvert.auditing.membership import record_in_card

            for path, entry in mia.items():
                record_in_card(path, entry, members, non_members)
    _write_reports(results, policy, mia, json_path, markdown_path, html_path, paths)
    if not all(r.passed for r in results):
        raise typer.Exit(1)


def _write_reports(results, policy, mia: dict, json_path, markdown_path, html_path, roots=()) -> None:
    """The audit's files: the JSON report and the HTML page (all or nothing), the Markdown table (appended)."""
    from dpconvert.io.atomic import AtomicOutputs

    with AtomicOutputs() as o:
        if json_path is not None:
            report = {"policy": policy.to_dict(), "passed": all(r.passed for r in results), "models": [r.to_dict() for r in results]}
            if mia:
                report["membership_inference"] = mia
            o.write(json_path, json.dumps(report, indent=2, default=str) + "\n")
        if html_path is not None:
            from dpconvert.auditing.report import html_report

            o.write(html_path, html_report(results, policy.to_dict(), roots))
    if markdown_path is not None:
        from .render import audit_markdown

        with open(markdown_path, "a", encoding="utf-8") as f:
            f.write(audit_markdown(results))


# ------------------------------------------------------------------ card show | verify | keygen | sign
@card_app.command("show")
def card_show(
    file: Annotated[Path, typer.Argument(help="A model (.onnx), a data set (.npz), a *.card.json or a Hub README.md.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON instead of Markdown.")] = False,
) -> None:
    """Pretty-print a card (it is not verified here: `dpconvert card verify` or `audit` does that)."""
    from dpconvert.zoo_cards import render_markdown
    from dpconvert.zoo_cards.read import read_card

    card = read_card(file)
    if as_json:
        print(card.to_json())
        return
    from rich.markdown import Markdown

    out.print(Markdown(render_markdown(card).split("---\n", 2)[-1]), soft_wrap=False)  # wrapped at the terminal's width, never cut


@card_app.command("verify")
def card_verify(
    file: Annotated[Path, typer.Argument(help="A model file, a data set (.npz) or its *.card.json.")],
    max_eps: Annotated[Optional[float], typer.Option("--max-eps", help="Fail if ε exceeds this.")] = None,
    max_delta: Annotated[Optional[float], typer.Option("--max-delta", help="Fail if δ exceeds this (default: the ceiling, 1e-4).")] = None,
    require_scope: Annotated[Optional[str], typer.Option("--require-scope", help="Require this scope: record or query.")] = None,
    allow_seeded_noise: Annotated[bool, typer.Option("--allow-seeded-noise", help="Let a card with seeded (not secret) noise pass.")] = False,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="A folder of *.pub keys whose signatures are accepted.")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature", help="Fail unless signed by a key in --trusted-keys.")] = False,
) -> None:
    """Run the audit checks on one model or data set, and list every check."""
    from dpconvert.auditing.audit import Policy, audit_model, discover

    from .render import print_audit

    try:
        (target,) = discover([str(file)])
        policy = Policy(max_eps=max_eps, max_delta=max_delta, require_scope=require_scope, allow_seeded_noise=allow_seeded_noise,
                        trusted_keys=str(trusted_keys) if trusted_keys else None, require_signature=require_signature)
        result = audit_model(target, policy)
    except DpconvertError as e:
        _exit_usage(str(e))
    print_audit([result])
    for c in result.checks:
        out.print(f"{'ok ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail else ""), markup=False)
    if not result.passed:
        raise typer.Exit(1)


@card_app.command("export")
def card_export(
    file: Annotated[Path, typer.Argument(help="An ONNX model with its card, or a *.card.json.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Where to write the model card (e.g. README.md of a Hub repository).")],
    fmt: Annotated[str, typer.Option("--format", help="hf: a Hugging Face model card (YAML front matter + Markdown).")] = "hf",
    license: Annotated[str, typer.Option("--license", help="The license identifier for the front matter (e.g. apache-2.0).")] = "other",
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
) -> None:
    """Write a model card for where people look: a Hugging Face README with the privacy section and metrics.
    `dpconvert audit` fails a README that was edited afterwards: it is a copy of the card."""
    from dpconvert.io.atomic import AtomicOutputs
    from dpconvert.zoo_cards.hf import check_license, render_hf_model_card
    from dpconvert.zoo_cards.read import read_card

    if fmt != "hf":
        raise DpconvertError(f"unknown --format {fmt!r}; choose hf")
    check_license(license)
    if out_path.exists() and not force:
        raise DpconvertError(f"{out_path} exists; give --force to replace it, or another --out")
    card = read_card(file)
    if card.kind != "model":
        raise DpconvertError(f"{file}: a data set's card has no Hugging Face model card; publish the .npz with its .card.json")
    with AtomicOutputs() as o:
        o.write(out_path, render_hf_model_card(card, license=license))
    out.print(f"wrote {out_path}", markup=False)


@card_app.command("keygen")
def card_keygen(path: Annotated[Path, typer.Argument(help="Where to write the private key (mode 0600); the public key goes to PATH.pub.")]) -> None:
    """Create an Ed25519 key pair for signing cards. Keep PATH secret (a CI secret); publish PATH.pub to auditors."""
    from dpconvert.zoo_cards.signing import generate_key

    priv, pub, kid = generate_key(path)
    out.print(f"private key {priv} (keep secret), public key {pub}, key id {kid}", markup=False)


@card_app.command("sign")
def card_sign(
    model: Annotated[Path, typer.Argument(help="An .onnx model written by dpconvert, or a data set (.npz) written by dpconvert synth.")],
    key: Annotated[Path, typer.Option("--key", help="The Ed25519 private key (dpconvert card keygen).")],
) -> None:
    """Sign a card: every copy (the embedded one, OUT.card.json, OUT.card.md, a Hub README beside it) is rewritten together."""
    from dpconvert.zoo_cards.signing import load_private_key, sign_model

    signed = sign_model(model, load_private_key(key))
    out.print(f"signed {model} with key {signed.data['signature']['key_id']}", markup=False)


# ------------------------------------------------------------------ entry point
KNOWN_COMMANDS = {"inspect", "plan", "convert", "audit", "card", "synth"}


def _with_default_command(argv: list[str]) -> list[str]:
    """``dpconvert TEACHER ...`` means ``dpconvert convert TEACHER ...``."""
    for i, arg in enumerate(argv):
        if arg in ("--version", "-h", "--help"):
            return argv
        if arg.startswith("-"):
            continue
        if arg not in KNOWN_COMMANDS:
            return argv[:i] + ["convert"] + argv[i:]
        return argv
    return argv


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notices are not the user's business
    argv = _with_default_command(sys.argv[1:])
    try:
        rc = app(args=argv, prog_name="dpconvert", standalone_mode=False)
        if isinstance(rc, int) and rc:  # Typer turns Ctrl-C into Exit(130) and returns the code
            if rc == 130:
                err.print("interrupted; no output was written", style="bold red")
            sys.exit(rc)
    except DpconvertError as e:
        err.print(f"error: {as_flags(str(e))}", style="bold red", markup=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted; no output was written", style="bold red")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors and aborts (Typer may vendor its own click)
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(1)
        raise
    sys.exit(0)
