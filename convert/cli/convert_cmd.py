"""``dpconvert convert`` (the main job, also ``dpconvert TEACHER …``) and ``dpconvert synth`` (a DP synthetic data set)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from dpconvert.errors import DpconvertError
from dpconvert.accounting.statements import DELTA_CEILING
from dpconvert.options import DEFAULT_DELTA, DEFAULT_EPS

from .app import (A, ADLM, D, DATA, DPDFD, DPSGD, G, OUTPUT, P, PKNN, PRIVACY, S, TEACHER, Arch, ClassNames, Device, InChans, InputSize,
                  Mean, NumClasses, Std, TrustPickle, Weights, _class_names, _given, _load_options, app, method_help)
from .console import out


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
    method: Annotated[str, typer.Option("--method", help=method_help() + " Record-level methods need --private-data.", rich_help_panel=PRIVACY)] = "auto",
    eps: Annotated[Optional[float], typer.Option("--eps", help=f"Target ε; the noise is calibrated to it (default {DEFAULT_EPS:g} unless --noise-multiplier).", rich_help_panel=PRIVACY)] = None,
    delta: Annotated[Optional[float], typer.Option("--delta", help=f"Target δ (default: DPDFD ≤ 1/(B·T), one over the protected teacher answers; other methods {DEFAULT_DELTA:g}). At most {DELTA_CEILING:g} unless --allow-large-delta.", rich_help_panel=PRIVACY)] = None,
    allow_large_delta: Annotated[bool, typer.Option("--allow-large-delta", help=f"Accept a δ above {DELTA_CEILING:g} (the card warns; audit fails it unless --max-delta admits it).", rich_help_panel=PRIVACY)] = False,
    no_privacy: Annotated[bool, typer.Option("--no-privacy", help="DPDFD without noise (ε = ∞): a non-private student for comparison only; its card says so and every audit fails it. --eps inf and --noise-multiplier 0 need it.", rich_help_panel=PRIVACY)] = False,
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="DPDFD and DP-SGD: use this noise multiplier σ instead of calibrating to --eps; ε is computed and printed (DP-SGD also takes it as --sigma).", rich_help_panel=PRIVACY)] = None,
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
    reporter = ProgressReporter(err_console if as_json else out, show_time)  # stdout carries only the card under --json
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

    from dpconvert.methods.dpgan import GanOptions
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
