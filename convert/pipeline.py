"""The main job: load teacher → plan budget → run a mechanism (DPDFD, Private-kNN) → export → card.

``convert(...)`` is the Python API behind ``dpconvert TEACHER --eps 1 --out
student.onnx``. It writes nothing until everything has succeeded: the ONNX
student, ``<out>.card.json`` and ``<out>.card.md`` appear together or not at all.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from . import __version__
from .errors import DpconvertError
from .registry import Registry

log = logging.getLogger("dpconvert")

NOT_COVERED = [
    "evaluation numbers computed on private data (the utility block)",
    "the teacher itself and anything released about it outside this card",
    "hyper-parameter choices tuned on private data, if any were",
]


@dataclass
class ConvertOptions:
    out: Path
    eps: Optional[float] = 1.0
    delta: float = 1e-5
    noise_multiplier: Optional[float] = None  # give σ and compute ε instead of calibrating
    releases: int = 1  # T: noisy releases
    batch_size: Optional[int] = None  # B: rows per release (default from the input size)
    clip: float = 1.0
    student: Optional[str] = None
    distill_loss: Optional[str] = None  # DPDFD's L_T (convert/dpdfd.py DISTILL_LOSSES); None → DEFAULT_DISTILL_LOSS
    generator: Optional[str] = None  # a learned generator mixed with the prior, e.g. "dafl"
    prior: Optional[str] = None  # the data-free query prior (generators.PRIORS; default from the input size)
    prior_pool: int = 10
    student_epochs: Optional[int] = None  # default from the input size
    seed: int = 0
    device: str = "cpu"
    eval_data: Optional[str] = None
    parity_inputs: int = 256
    command: Optional[str] = None
    overrides: dict = field(default_factory=dict)  # any other DpdfdConfig field
    method: str = "auto"  # dpdfd | pknn | auto (pknn when --private-data is given)
    private_data: Optional[str] = None
    public_data: Optional[str] = None
    pknn: dict = field(default_factory=dict)  # PknnConfig fields
    method_reason: str = ""
    canaries: int = 0  # Private-kNN: one-run canary audit with this many canaries (convert/canaries.py)
    save_generator: Optional[str] = None  # DPDFD: save the learned generator (+ its DPDFD events) for Private-kNN queries
    query_generator: Optional[str] = None  # Private-kNN: queries from a saved generator FILE, "prior", or "train" (DPDFD in this run)
    generator_eps: Optional[float] = None  # Private-kNN with --query-generator train: the generator's share of --eps (default half)
    seeded_noise: bool = False  # opt-in (tests, benchmarks): draw the mechanism's noise/subsamples from --seed instead of OS entropy (convert/noise.py)
    sign_key: Optional[str] = None  # an Ed25519 private key file: the card is signed before it is written (zoo_cards/signing.py)
    pixel_range: Optional[float] = None  # the maximum pixel value of stored non-uint8 data (convert/data.py); None: uint8 or float in [0, 1]


@dataclass
class ConvertResult:
    out: Path
    card_json: Path
    card_md: Path
    card: object  # PrivacyCard
    seconds: float
    rounds: list


DEFAULT_DISTILL_LOSS = "logits"  # chosen by benchmark (benchmarks/RESULTS.md §1, §3)


def default_batch_size(spec) -> int:
    """Rows per release: ε does not depend on it; the student's signal-to-noise grows with √B.

    Sized so a conversion fits a few minutes on 2 CPU cores (benchmarks/RESULTS.md).
    """
    pixels = spec.channels * spec.height * spec.width
    if pixels <= 256:
        return 300_000
    if pixels <= 1024:
        return 100_000
    return 32_768


def default_epochs(spec) -> int:
    """Student passes over the released pairs. With the cosine schedule, 8 on 28×28 beat 4 (FMNIST ε=1: 48.8 vs 35.1 %,
    ~11 min on 2 cores; benchmarks/RESULTS.md §3)."""
    return 6 if spec.channels * spec.height * spec.width <= 256 else 8


def check_output_path(out: Path) -> Path:
    out = Path(out)
    if out.suffix.lower() != ".onnx":
        raise DpconvertError(f"--out must end in .onnx (the student is exported to ONNX), got {out.name!r}")
    if out.exists() and out.is_dir():
        raise DpconvertError(f"--out {out} is a directory; give a file name such as {out / 'student.onnx'}")
    if not out.parent.exists():
        raise DpconvertError(f"the folder {out.parent} does not exist; create it or choose another --out")
    return out


def check_prior_name(name: str) -> str:
    from dpconvert.generators import PRIORS

    if name not in PRIORS:
        raise DpconvertError(f"unknown --prior {name!r}; choose one of: {', '.join(PRIORS)}")
    return name


def check_generator_path(path: str, out: Path, has_generator: bool) -> None:
    p = Path(path)
    if not has_generator:
        raise DpconvertError("--save-generator needs a learned generator: add --generator dafl (the default prior is data-independent; "
                             "Private-kNN can use it directly with --query-generator prior)")
    if p.suffix != ".safetensors":
        raise DpconvertError(f"--save-generator must end in .safetensors, got {p.name!r}")
    if not p.parent.exists():
        raise DpconvertError(f"the folder {p.parent} does not exist; create it or choose another --save-generator path")
    if p.resolve() == Path(out).resolve():
        raise DpconvertError("--save-generator and --out must be different files")


def plan_for(opts: ConvertOptions, batch_size: int) -> dict:
    from .planning import plan_dpdfd

    if opts.eps is None and opts.noise_multiplier is None:
        raise DpconvertError("give --eps (target) or --noise-multiplier (and ε is computed)")
    return plan_dpdfd(eps=opts.eps, delta=opts.delta, steps=opts.releases, batch_size=batch_size,
                      noise_multiplier=opts.noise_multiplier)


@dataclass
class MethodOutput:
    """What a mechanism hands to the shared export + card step."""

    student: object
    student_name: str
    probe: object  # public/synthetic inputs for the ONNX parity check
    guarantee: dict
    accounting: dict
    mechanism: dict
    warnings: list
    rounds: list
    audit: Optional[dict] = None  # empirical evidence produced during the run (the canary audit)
    extra_files: dict = field(default_factory=dict)  # path → bytes, written all-or-nothing with the model and card
    generator: Optional[object] = None  # DPDFD: the learned generator (Private-kNN's in-run query generator uses it)


def convert(teacher_source: str, opts: ConvertOptions, load_options=None,
            on_plan: Optional[Callable[[dict], None]] = None, on_progress: Optional[Callable[[dict], None]] = None) -> ConvertResult:
    from .teachers import LoadOptions, load_teacher

    start = time.perf_counter()
    out = check_output_path(opts.out)
    signing_key = _signing_key(opts.sign_key)  # an unreadable key fails now, not after the whole run
    method, reason = choose_method(opts)
    opts = replace(opts, method_reason=reason)  # the caller's options stay untouched
    if opts.canaries and method != "pknn":
        raise DpconvertError("--canaries audits Private-kNN (it inserts records into the private set); use it with --method pknn --private-data PATH")
    load_options = load_options or LoadOptions(device=opts.device)
    teacher = load_teacher(teacher_source, load_options)
    eval_ds = None
    if opts.eval_data:
        from .data import load_data

        eval_ds = load_data(opts.eval_data, teacher.spec, require_labels=True, pixel_range=opts.pixel_range)
    result = METHODS.get(method)(teacher, opts, on_plan, on_progress)
    utility = evaluate(teacher, result.student, eval_ds, opts.device) if eval_ds is not None else None
    card = _write_outputs(teacher_source, teacher, out, opts, result, utility, signing_key)
    for w in card.data["warnings"]:
        log.warning("warning: %s", w)
    return ConvertResult(out, *_card_paths(out), card, time.perf_counter() - start, result.rounds)


def choose_method(opts: ConvertOptions) -> tuple[str, str]:
    """(method, why): ``auto`` means Private-kNN when private data is given, DPDFD otherwise."""
    if opts.method == "auto":
        if opts.private_data:
            return "pknn", "private data given: record-level Private-kNN"
        if opts.public_data:
            return "dpdfd", "no private data: DPDFD (query-level) on augmented public-image queries (not data-free)"
        return "dpdfd", "no private data: data-free DPDFD (query-level)"
    if opts.method not in METHODS:
        raise DpconvertError(METHODS.unknown_message(opts.method))
    return opts.method, "chosen with --method"


def _card_paths(out: Path):
    from dpconvert.zoo_cards import card_paths

    return card_paths(out)


def _signing_key(path: Optional[str]):
    if path is None:
        return None
    from dpconvert.zoo_cards.signing import load_private_key

    return load_private_key(path)


def _write_outputs(teacher_source, teacher, out: Path, opts: ConvertOptions, r: MethodOutput, utility, signing_key=None):
    from dpconvert.zoo_cards import PrivacyCard, model_sha256
    from dpconvert.zoo_cards.onnx_meta import SHA256_METHOD, write_model_with_card

    from .export import OPSET, export_onnx, parity

    spec = teacher.spec
    student = r.student.cpu().eval()
    warnings = list(teacher.warnings) + list(r.warnings)
    proto = export_onnx(student, spec.shape)
    par = parity(student, proto, r.probe.cpu())
    if par.max_abs_diff > 1e-3 or par.top1_agreement < 0.99:
        warnings.append(f"ONNX parity is weak: max |Δ| = {par.max_abs_diff:.2e}, top-1 agreement {par.top1_agreement:.3f}")
    card = PrivacyCard({
        "schema_version": "1.0",
        "dpconvert_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": opts.command or f"dpconvert {shlex.quote(teacher_source)} --out {shlex.quote(out.name)}",
        "seed": opts.seed,
        "model": {
            "file": out.name, "sha256": model_sha256(proto), "sha256_method": SHA256_METHOD, "format": "onnx", "opset": OPSET,
            "input_shape": [None, *spec.shape], "mean": list(spec.mean), "std": list(spec.std), "num_classes": spec.num_classes,
            "class_names": None, "num_params": int(sum(p.numel() for p in student.parameters())), "architecture": r.student_name,
        },
        "teacher": {"source": teacher_source, "kind": teacher.kind, "sha256": teacher.sha256, "architecture": teacher.arch, "trained_with_dp": None},
        "guarantee": r.guarantee,
        "accounting": r.accounting,
        "mechanism": {**r.mechanism, "method_choice": opts.method_reason},
        "utility": utility,
        "export": {"onnx_checker": "passed (full_check=True)", "parity": par.to_dict(), "onnxruntime_device": "cpu"},
        "audit": r.audit,
        "warnings": warnings,
    }).validate("generated card")
    if signing_key is not None:
        from dpconvert.zoo_cards.signing import sign_card

        card = sign_card(card, signing_key)
    write_model_with_card(str(out), proto, card, extra=r.extra_files)
    return card


METHODS: Registry[Callable[..., MethodOutput]] = Registry("method")


@METHODS.register("dpdfd")
def run_dpdfd(teacher, opts: ConvertOptions, on_plan, on_progress) -> MethodOutput:
    import torch

    from .accounting import DpdfdAccountant, library_versions
    from .dpdfd import DISTILL_LOSSES, Dpdfd, DpdfdConfig
    from .generators import PRIORS, create_generator, default_prior_name
    from .noise import SEEDED_WARNING, mechanism_rng
    from .students import create_student, default_student_name
    from .teacher_checks import PROBE_SIZE, check_teacher

    if opts.clip <= 0:
        raise DpconvertError("--clip must be > 0")
    if opts.releases < 1:
        raise DpconvertError("--steps must be >= 1")
    spec = teacher.spec
    if opts.public_data and opts.prior:
        raise DpconvertError("--prior picks the data-free query prior and --public-data replaces it: drop one of them")
    prior_name = check_prior_name(opts.prior or default_prior_name(spec))
    warnings = []
    batch_size = opts.batch_size or default_batch_size(spec)
    if batch_size < 1:
        raise DpconvertError("--batch-size must be >= 1")
    plan = plan_for(opts, batch_size)
    answers = batch_size * opts.releases
    if opts.delta * answers > 1:  # δ is the chance the guarantee fails outright; with more protected answers than 1/δ it is weak
        warnings.append(f"δ={opts.delta:g} is larger than 1/(B·T) = 1/{answers} for the {answers} protected teacher answers; "
                        f"use --delta {10.0 ** -math.ceil(math.log10(answers)):g} or smaller")
    if opts.noise_multiplier is not None and opts.noise_multiplier == 0:
        warnings.append("noise multiplier 0: this student is NOT differentially private (ε = ∞); for comparison only")
    epochs = opts.student_epochs or default_epochs(spec)
    if epochs < 1:
        raise DpconvertError("--epochs must be >= 1")
    plan["student_epochs"] = epochs
    plan["method_choice"] = opts.method_reason
    if on_plan:
        on_plan(plan)

    torch.manual_seed(opts.seed)
    student_name = opts.student or default_student_name(spec)
    student = create_student(student_name, spec)
    if opts.public_data:  # explicit, labelled option: queries from public images instead of the random-field prior
        from dpconvert.generators.public_images import PublicImageSource

        from .data import load_data

        public = load_data(opts.public_data, spec, pixel_range=opts.pixel_range)
        if len(public) == 0:
            raise DpconvertError(f"{opts.public_data}: the public set is empty; give public images or drop --public-data")
        prior = PublicImageSource(public.x)
        source = f"public images {opts.public_data} ({len(public)}, unlabelled; shift/flip/mixup augmentation) — not data-free"
    else:
        prior = create_generator(prior_name, spec)
        source = PRIORS[prior_name]
    generator = create_generator(opts.generator, spec) if opts.generator else None
    if opts.save_generator:
        check_generator_path(opts.save_generator, opts.out, generator is not None)
    settings = dict(releases=opts.releases, batch_size=batch_size, sigma=plan["sigma"], clip=opts.clip,
                    prior_pool=opts.prior_pool, student_epochs=epochs, seed=opts.seed, distill_loss=opts.distill_loss or DEFAULT_DISTILL_LOSS,
                    prior_fraction=1.0 if generator is None else 0.5, minibatch=2048, student_lr=2e-3,
                    lr_schedule="cosine", logit_adjust=True)
    unknown = sorted(set(opts.overrides) - set(DpdfdConfig.__dataclass_fields__))
    if unknown:
        raise DpconvertError(f"unknown DPDFD setting {unknown[0]!r}")
    DISTILL_LOSSES.get(opts.overrides.get("distill_loss", settings["distill_loss"]))  # one-line error naming the choices
    cfg = DpdfdConfig(**{**settings, **opts.overrides})
    accountant = DpdfdAccountant()
    noise_rng, noise_info = mechanism_rng(cfg.seed, seeded=opts.seeded_noise)
    if opts.seeded_noise:
        warnings.append(SEEDED_WARNING)
    job = Dpdfd(teacher, student, generator, cfg, accountant, device=opts.device, prior=prior, noise_rng=noise_rng)
    check_teacher(teacher, job.probe_inputs(PROBE_SIZE))  # row independence and finite answers, before any release
    if on_progress:
        job.attach_holdout()
    rounds: list = []
    job.run(lambda info: rounds.append(info), on_progress=on_progress)
    if job.mechanism.zeroed_rows:  # console only: how many answers were non-finite depends on the teacher
        log.warning("note (console only): %d teacher answers were not finite and were released as zero rows (pure noise)",
                    job.mechanism.zeroed_rows)

    # The accountant, fed by the mechanism that drew the noise, must agree with the plan.
    eps_spent = accountant.epsilon(delta=opts.delta)
    if accountant.count("normalised_gaussian_release") != opts.releases or not math.isclose(eps_spent, plan["epsilon"], rel_tol=1e-9, abs_tol=1e-12):
        raise DpconvertError(f"internal error: the mechanism spent ε={eps_spent} but the plan said ε={plan['epsilon']}; nothing was written")
    if opts.eps is not None and eps_spent > opts.eps:
        raise DpconvertError(f"internal error: ε spent {eps_spent} exceeds the target {opts.eps}; nothing was written")
    mechanism = {
        "method": "dpdfd",
        "sigma": plan["sigma"], "clip": opts.clip, "batch_size": batch_size, "releases": opts.releases,
        "distill_loss": cfg.distill_loss, **noise_info,
        "distinct_inputs": True,  # Dpdfd.distinct_queries: no input twice in a release (the auditor checks for it)
        "query_source": source + (f" + {opts.generator} generator" if generator is not None else "")
                        + (f", student-guided selection from a pool ×{cfg.prior_pool}" if cfg.prior_pool > 1 and opts.releases > 1 else ""),
        "config": cfg.to_dict(),
    }
    extra = {}
    if opts.save_generator:
        from dpconvert.generators.saved import generator_bytes

        extra[opts.save_generator] = generator_bytes(generator, opts.generator, spec, generator_cost(accountant, teacher, eps_spent, opts.delta, mechanism))
    return MethodOutput(
        student=student, student_name=student_name, probe=job.synthesise(opts.parity_inputs), rounds=rounds, warnings=warnings,
        extra_files=extra, generator=generator,
        guarantee={
            "epsilon": _num(plan["epsilon"]), "delta": opts.delta, "scope": "query", "adjacency": plan["adjacency"],
            "record_level_epsilon": _num(plan["record_level_epsilon"]), "replace_one_epsilon": _num(plan["replace_one_epsilon"]),
            "covers": ["the released student model (weights and graph in this file)", "any later use of the student (post-processing)"],
            "not_covered": NOT_COVERED + (["the public query images (assumed public; not protected)"] if opts.public_data else []),
        },
        accounting={
            "accountant": accountant.name,
            "epsilons": {k: _num(v) for k, v in accountant.epsilons(delta=opts.delta).items() if k != "epsilon"},
            "cross_check": {k: _num(v) for k, v in (accountant.cross_check(delta=opts.delta) if plan["sigma"] > 0 else {}).items()},
            "libraries": library_versions(),
            "calibrated": plan["calibrated"],
            "target_epsilon": opts.eps if plan["calibrated"] else None,
            "state": accountant.state_dict(),
        },
        mechanism=mechanism,
    )


def generator_cost(accountant, teacher, epsilon: float, delta: float, mechanism: dict):
    """What a DPDFD-trained generator cost: the run's events, its teacher, and the mechanism facts its ε rests on."""
    from dpconvert.generators.saved import COST_MECHANISM_KEYS, GeneratorCost

    return GeneratorCost(accountant.state_dict(), "query", teacher.sha256, epsilon, delta, {k: mechanism[k] for k in COST_MECHANISM_KEYS})


def _num(v: float):
    """JSON has no infinity: ε = ∞ (no noise) is written as the string "inf"."""
    return "inf" if isinstance(v, float) and math.isinf(v) else v


def evaluate(teacher, student, ds, device: str) -> dict:
    import torch

    student.eval()
    with torch.no_grad():
        s = torch.cat([student(x.to(device)).argmax(1).cpu() for x in ds.x.split(1024)])
    with torch.inference_mode():
        t = torch.cat([teacher(x).argmax(1).cpu() for x in ds.x.split(1024)])
    return {
        "evaluation_data": ds.description,
        "examples": len(ds),
        "teacher_accuracy": float((t == ds.y).float().mean()),
        "student_accuracy": float((s == ds.y).float().mean()),
        "agreement": float((s == t).float().mean()),
        "covered_by_guarantee": False,
        "note": "computed outside the DP mechanism; if the evaluation data is private, these numbers are not protected",
    }


from . import pknn_job as _pknn_job  # noqa: E402,F401  (registers the "pknn" method)
