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
    generator: Optional[str] = None  # a learned generator mixed with the prior, e.g. "dafl"
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
    query_generator: Optional[str] = None  # Private-kNN: queries from a saved generator FILE or "prior"


@dataclass
class ConvertResult:
    out: Path
    card_json: Path
    card_md: Path
    card: object  # PrivacyCard
    seconds: float
    rounds: list


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
    return 6 if spec.channels * spec.height * spec.width <= 256 else 4


def check_output_path(out: Path) -> Path:
    out = Path(out)
    if out.suffix.lower() != ".onnx":
        raise DpconvertError(f"--out must end in .onnx (the student is exported to ONNX), got {out.name!r}")
    if out.exists() and out.is_dir():
        raise DpconvertError(f"--out {out} is a directory; give a file name such as {out / 'student.onnx'}")
    if not out.parent.exists():
        raise DpconvertError(f"the folder {out.parent} does not exist; create it or choose another --out")
    return out


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


def convert(teacher_source: str, opts: ConvertOptions, load_options=None,
            on_plan: Optional[Callable[[dict], None]] = None, on_progress: Optional[Callable[[dict], None]] = None) -> ConvertResult:
    from .teachers import LoadOptions, load_teacher

    start = time.perf_counter()
    out = check_output_path(opts.out)
    method, reason = choose_method(opts)
    opts = replace(opts, method_reason=reason)  # the caller's options stay untouched
    if opts.canaries and method != "pknn":
        raise DpconvertError("--canaries audits Private-kNN (it inserts records into the private set); use it with --method pknn --private-data PATH")
    load_options = load_options or LoadOptions(device=opts.device)
    teacher = load_teacher(teacher_source, load_options)
    eval_ds = None
    if opts.eval_data:
        from .data import load_data

        eval_ds = load_data(opts.eval_data, teacher.spec, require_labels=True)
    result = METHODS.get(method)(teacher, opts, on_plan, on_progress)
    utility = evaluate(teacher, result.student, eval_ds, opts.device) if eval_ds is not None else None
    card = _write_outputs(teacher_source, teacher, out, opts, result, utility)
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


def _write_outputs(teacher_source, teacher, out: Path, opts: ConvertOptions, r: MethodOutput, utility):
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
    write_model_with_card(str(out), proto, card, extra=r.extra_files)
    return card


METHODS: Registry[Callable[..., MethodOutput]] = Registry("method")


@METHODS.register("dpdfd")
def run_dpdfd(teacher, opts: ConvertOptions, on_plan, on_progress) -> MethodOutput:
    import torch

    from .accounting import DpdfdAccountant, library_versions
    from .dpdfd import Dpdfd, DpdfdConfig
    from .generators import create_generator
    from .students import create_student, default_student_name

    if opts.clip <= 0:
        raise DpconvertError("--clip must be > 0")
    if opts.releases < 1:
        raise DpconvertError("--steps must be >= 1")
    spec = teacher.spec
    warnings = []
    batch_size = opts.batch_size or default_batch_size(spec)
    if batch_size < 1:
        raise DpconvertError("--batch-size must be >= 1")
    plan = plan_for(opts, batch_size)
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

        public = load_data(opts.public_data, spec)
        if len(public) == 0:
            raise DpconvertError(f"{opts.public_data}: the public set is empty; give public images or drop --public-data")
        prior = PublicImageSource(public.x)
        source = f"public images {opts.public_data} ({len(public)}, unlabelled; shift/flip/mixup augmentation) — not data-free"
    else:
        prior = create_generator("random_fields", spec)
        source = "random-field prior"
    generator = create_generator(opts.generator, spec) if opts.generator else None
    if opts.save_generator:
        check_generator_path(opts.save_generator, opts.out, generator is not None)
    cfg = DpdfdConfig(releases=opts.releases, batch_size=batch_size, sigma=plan["sigma"], clip=opts.clip,
                      prior_pool=opts.prior_pool, student_epochs=epochs, seed=opts.seed,
                      prior_fraction=1.0 if generator is None else 0.5, minibatch=2048, student_lr=2e-3)
    for k, v in opts.overrides.items():
        if not hasattr(cfg, k):
            raise DpconvertError(f"unknown DPDFD setting {k!r}")
        setattr(cfg, k, v)
    accountant = DpdfdAccountant()
    job = Dpdfd(teacher, student, generator, cfg, accountant, device=opts.device, prior=prior)
    if on_progress:
        job.attach_holdout()
    rounds: list = []
    job.run(lambda info: rounds.append(info), on_progress=on_progress)

    # The accountant, fed by the mechanism that drew the noise, must agree with the plan.
    eps_spent = accountant.epsilon(delta=opts.delta)
    if accountant.count("normalised_gaussian_release") != opts.releases or not math.isclose(eps_spent, plan["epsilon"], rel_tol=1e-9, abs_tol=1e-12):
        raise DpconvertError(f"internal error: the mechanism spent ε={eps_spent} but the plan said ε={plan['epsilon']}; nothing was written")
    if opts.eps is not None and eps_spent > opts.eps:
        raise DpconvertError(f"internal error: ε spent {eps_spent} exceeds the target {opts.eps}; nothing was written")
    extra = {}
    if opts.save_generator:
        from dpconvert.generators.saved import GeneratorCost, generator_bytes

        cost = GeneratorCost(accountant.state_dict(), "query", teacher.sha256, eps_spent, opts.delta)
        extra[opts.save_generator] = generator_bytes(generator, opts.generator, spec, cost)
    return MethodOutput(
        student=student, student_name=student_name, probe=job.synthesise(opts.parity_inputs), rounds=rounds, warnings=warnings,
        extra_files=extra,
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
        mechanism={
            "method": "dpdfd",
            "sigma": plan["sigma"], "clip": opts.clip, "batch_size": batch_size, "releases": opts.releases,
            "distill_loss": cfg.distill_loss, "noise_rng": f"torch.Generator (CPU) seeded with {cfg.seed + 1}",
            "query_source": source + (f" + {opts.generator} generator" if generator is not None else "")
                            + (f", student-guided selection from a pool ×{cfg.prior_pool}" if cfg.prior_pool > 1 and opts.releases > 1 else ""),
            "config": cfg.to_dict(),
        },
    )


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


@METHODS.register("pknn")
def run_pknn(teacher, opts: ConvertOptions, on_plan, on_progress) -> MethodOutput:
    """Private-kNN on public queries: a record-level guarantee (ALGORITHMS.md §3)."""
    import torch

    from .accounting import library_versions
    from .accounting.pknn import ADJACENCY_RECORD
    from .data import load_data
    from .features import batched_features, create_features
    from .planning import plan_pknn
    from .private_knn import (PknnConfig, PknnMechanism, confident_pseudo_labels, histogram_targets, resolve_knn, student_features,
                              train_classifier)
    from .students import create_student, default_student_name

    spec = teacher.spec
    if not opts.private_data:
        raise DpconvertError("--method pknn needs the private training data: give --private-data PATH (labelled)")
    if opts.eps is None:
        raise DpconvertError("--method pknn needs --eps (σ2 is calibrated to it)")
    try:
        cfg = PknnConfig(**{"seed": opts.seed, **opts.pknn})
    except TypeError as e:
        raise DpconvertError(f"unknown Private-kNN setting ({e})") from None
    if cfg.labels not in ("hard", "soft") or cfg.label_temperature <= 0:
        raise DpconvertError(f"--labels must be soft or hard (got {cfg.labels!r}) and the label temperature > 0")
    source = pknn_query_source(opts, spec, cfg)
    private = load_data(opts.private_data, spec, require_labels=True)
    n = len(private)
    present = int(torch.unique(private.y).numel())
    if present != spec.num_classes:
        raise DpconvertError(f"{opts.private_data}: has {present} classes but the teacher has {spec.num_classes}; the private data must cover the teacher's classes")
    if cfg.k > cfg.sampling_rate * n / 2:
        raise DpconvertError(f"--k {cfg.k} is larger than half the expected subsample γ·n/2 = {cfg.sampling_rate * n / 2:.0f}; lower --k or raise --sampling-rate")
    if cfg.rounds < 1:
        raise DpconvertError("--rounds must be >= 1")
    threshold = cfg.threshold if cfg.threshold is not None else cfg.threshold_ratio * cfg.k
    knn = resolve_knn(cfg.knn, n)
    total_q = min(cfg.queries or len(source.x), len(source.x))
    if total_q < cfg.rounds:
        raise DpconvertError(f"only {total_q} queries for {cfg.rounds} rounds; give more queries or fewer --rounds")
    warnings = []
    if opts.delta > 1.0 / n:
        warnings.append(f"δ={opts.delta:g} is larger than 1/n={1.0 / n:.3g} for n={n} private records; consider --delta {10 ** -len(str(n)):g}")
    accountant, eps_labels, delta_labels = _pknn_budget(source, opts)
    # σ2 is fixed before any private data is touched, calibrated as if every query were answered:
    # the realised ε (answered queries only) can only be smaller.
    plan = plan_pknn(eps=eps_labels, delta=delta_labels, k=cfg.k, sampling_rate=cfg.sampling_rate, sigma1=cfg.sigma1, threshold=threshold,
                     sigma2=cfg.sigma2, num_classes=spec.num_classes, queries=total_q, answered=total_q)
    if cfg.sigma2 is not None and plan["epsilon"] > eps_labels:
        raise DpconvertError(f"--sigma2 {cfg.sigma2} gives ε={plan['epsilon']:.3f} > {eps_labels:.3f} if every query is answered; raise --sigma2 or ask fewer --queries")
    if source.cost is not None:  # the plan table shows both parts of the composition
        eps_gen = opts.eps - eps_labels
        plan["accountants"] = {"query generator, DPDFD at δ/2": eps_gen, **{f"labels, {k} at δ/2": v for k, v in plan["accountants"].items()}}
        plan.update(epsilon=eps_gen + plan["epsilon"], scope="query", adjacency=ADJACENCY_GENERATOR_PKNN, delta=opts.delta)
    plan["method_choice"] = opts.method_reason
    plan["private_records"] = n
    if on_plan:
        on_plan(plan)

    torch.manual_seed(opts.seed)
    rng = torch.Generator().manual_seed(opts.seed + 1)  # subsampling and noise: explicitly seeded, on the card
    train_rng = torch.Generator().manual_seed(opts.seed)
    order = torch.randperm(len(source.x), generator=train_rng)[:total_q]
    # with --canaries the mechanism sees the canaries as ordinary private records
    private_x, private_y, canaries = _with_canaries(private, source.x, order, opts, spec.num_classes)
    mech = PknnMechanism(private_y, spec.num_classes, k=cfg.k, sampling_rate=cfg.sampling_rate, sigma1=cfg.sigma1, threshold=threshold,
                         sigma2=plan["sigma2"], accountant=accountant, generator=rng, chunk=cfg.chunk, knn=knn)
    if on_progress:  # vote passes: screening for every query, the argmax for answered ones
        mech.on_chunk = lambda m: on_progress({"kind": "votes", "queries": m})
    per_round = order.tensor_split(cfg.rounds)
    phi = create_features(cfg.features, spec, source.x)
    student_name = opts.student or default_student_name(spec)
    xs, ys, rounds = [], [], []
    student = None
    for r, idx in enumerate(per_round, 1):
        t0 = time.perf_counter()
        pfeats = batched_features(phi, private_x)
        qx = source.x[idx]
        qfeats = batched_features(phi, qx)
        answered = mech.screen(qfeats, pfeats)
        targets = histogram_targets(mech.noisy_histogram(qfeats[answered], pfeats), cfg, mech.sigma2)
        xs.append(qx[answered])
        ys.append(targets)
        student = create_student(student_name, spec)
        train_classifier(student, torch.cat(xs), torch.cat(ys), epochs=cfg.student_epochs, lr=cfg.student_lr,
                         minibatch=cfg.minibatch, generator=train_rng)
        phi = student_features(student)  # DP by post-processing: trained on public queries + DP labels only
        info = {"kind": "round", "round": r, "asked": len(idx), "answered": int(answered.sum()), "seconds": time.perf_counter() - t0,
                "epsilon": accountant.epsilon(delta=opts.delta)}
        rounds.append(info)
        if on_progress:
            on_progress(info)
    if cfg.pseudo_label > 0:  # semi-supervised: answered labels + confident student labels on the rest of the public set
        answered_set = torch.cat(xs)
        px, py = confident_pseudo_labels(student, source.x, cfg.pseudo_label)
        student = create_student(student_name, spec)
        py = torch.nn.functional.one_hot(py, spec.num_classes).float()
        train_classifier(student, torch.cat([answered_set, px]), torch.cat([torch.cat(ys), py]), epochs=cfg.student_epochs,
                         lr=cfg.student_lr, minibatch=cfg.minibatch, generator=train_rng)
        rounds.append({"kind": "pseudo_label", "added": int(len(px)), "threshold": cfg.pseudo_label})
    eps_all = accountant.epsilons(delta=opts.delta)
    if eps_all["epsilon"] > opts.eps * (1 + 1e-9):
        raise DpconvertError(f"internal error: Private-kNN spent ε={eps_all['epsilon']} > target {opts.eps}; nothing was written")
    asked, answered_total = accountant.count("pknn_screening"), accountant.count("pknn_argmax")
    audit = None
    if canaries is not None:
        from .canaries import audit_scores, canary_scores

        cx, cy, bits = canaries
        res = audit_scores(canary_scores(student, cx, cy), bits.numpy(), delta=opts.delta)
        del canaries, bits  # the inclusion bits never leave this function; only the bound does
        audit = {"kind": "empirical — evidence, not a DP guarantee", "canary": res.to_dict()}
        if res.epsilon_lower_bound > eps_all["epsilon"]:
            warnings.append(f"canary audit: empirical ε lower bound {res.epsilon_lower_bound:.3f} exceeds the card's ε "
                            f"{eps_all['epsilon']:.3f} (expected in ≤ 5 % of runs of a correct mechanism); investigate before release")
    composed = source.cost is not None
    return MethodOutput(
        student=student, student_name=student_name, probe=source.x[: opts.parity_inputs], rounds=rounds, warnings=warnings, audit=audit,
        guarantee={
            "epsilon": eps_all["epsilon"], "delta": opts.delta, "scope": "query" if composed else "record",
            "adjacency": ADJACENCY_GENERATOR_PKNN if composed else ADJACENCY_RECORD,
            "record_level_epsilon": accountant.record_level_epsilon(delta=opts.delta) if composed else eps_all["epsilon"],
            "covers": ["the released student model (weights and graph in this file)", "the DP labels of the queries",
                       "any later use of the student (post-processing)"],
            "not_covered": NOT_COVERED + [source.not_covered],
        },
        accounting={
            "accountant": accountant.name,
            "epsilons": {k: v for k, v in eps_all.items() if k != "epsilon"},
            "libraries": library_versions(),
            "calibrated": plan["calibrated"],
            "target_epsilon": opts.eps,
            "state": accountant.state_dict(),
            "note": "screening charged for every query; noisy argmax (independent Poisson subsample) only for answered queries; "
                    "σ2 calibrated as if every query were answered"
                    + ("; the query generator's DPDFD events (replayed from its file) composed by basic composition, each part at δ/2" if composed else ""),
        },
        mechanism={
            "method": "private-knn", "k": cfg.k, "sampling_rate": cfg.sampling_rate, "sampling": "Poisson (independent per record, per query, per step)",
            "sigma1": cfg.sigma1, "threshold": threshold, "sigma2": plan["sigma2"], "queries_asked": asked, "queries_answered": answered_total,
            "rounds": cfg.rounds, "features": f"{cfg.features} (round 1), then the previous round's student", "private_records": n,
            "knn_search": KNN_SEARCH[knn], "public_queries": opts.public_data, "query_source": source.description, "labels": _label_description(cfg),
            "noise_rng": f"torch.Generator (CPU) seeded with {opts.seed + 1}", "config": cfg.to_dict(),
            **({"query_generator": source.generator_info} if composed else {}),
        },
    )


ADJACENCY_GENERATOR_PKNN = ("add/remove one teacher answer in the query generator's DPDFD run and add/remove one record of the "
                            "private data set (Private-kNN labels)")
KNN_SEARCH = {"exact": "exact (torch cdist over every record, full per-query Poisson mask)",
              "faiss": "exact (faiss IndexFlatL2, oversampled candidates with lazily drawn Poisson bits, full-mask fallback)"}
GENERATOR_QUERIES = 5000  # default number of generator queries when --queries is not given


@dataclass
class QuerySource:
    """Private-kNN query images and what they cost (``cost`` is None when they are independent of all private data)."""

    x: object
    description: str
    not_covered: str
    cost: Optional[object] = None  # GeneratorCost of a DPDFD-trained generator
    generator_info: Optional[dict] = None


def pknn_query_source(opts: ConvertOptions, spec, cfg) -> QuerySource:
    """Queries from --public-data, the data-independent prior, or a saved DPDFD generator (--query-generator)."""
    import torch

    from .data import load_data

    if opts.public_data and opts.query_generator:
        raise DpconvertError("give one query source: --public-data PATH or --query-generator (FILE or prior), not both")
    if opts.public_data:
        public = load_data(opts.public_data, spec)
        if len(public) == 0:
            raise DpconvertError(f"{opts.public_data}: the public set is empty; give public images to label")
        return QuerySource(public.x, f"public images {opts.public_data} ({len(public)}, unlabelled)", "the public query set itself (assumed public)")
    if not opts.query_generator:
        raise DpconvertError("--method pknn needs queries: give --public-data PATH (unlabelled public images) or "
                             "--query-generator FILE (saved with --save-generator) or --query-generator prior")
    n = cfg.queries or GENERATOR_QUERIES
    rng = torch.Generator().manual_seed(opts.seed + 3)
    if opts.query_generator == "prior":  # data-independent: no cost, the record-level guarantee stands alone
        from dpconvert.generators import create_generator
        from dpconvert.generators.saved import sample_queries

        prior = create_generator("random_fields", spec)
        return QuerySource(sample_queries(prior, n, spec.num_classes, rng), f"random-field prior ({n} samples; data-independent)",
                           "nothing beyond the above: the queries are data-independent")
    from dpconvert.generators.saved import load_saved_generator, sample_queries

    saved = load_saved_generator(opts.query_generator)
    if (saved.spec.shape, saved.spec.num_classes) != (spec.shape, spec.num_classes):
        raise DpconvertError(f"{opts.query_generator}: the generator makes {saved.spec.shape} inputs for {saved.spec.num_classes} classes, "
                             f"the teacher takes {spec.shape} and {spec.num_classes}; save a generator for this teacher")
    info = {"file": Path(opts.query_generator).name, "architecture": saved.name, "teacher_sha256": saved.cost.teacher_sha256,
            "dpdfd_epsilon_at_its_delta": saved.cost.card_epsilon, "its_delta": saved.cost.card_delta, "samples": n}
    return QuerySource(sample_queries(saved.generator, n, spec.num_classes, rng),
                       f"DPDFD generator {Path(opts.query_generator).name} ({saved.name}; {n} samples)",
                       "the teacher beyond the generator's query-level DPDFD guarantee (see record_level_epsilon)",
                       cost=saved.cost, generator_info=info)


def _pknn_budget(source: QuerySource, opts: ConvertOptions):
    """(accountant, ε for the labels, δ for the labels): the whole budget, or what the generator left of it."""
    from .accounting import DpdfdAccountant, GeneratorPknnAccountant, PknnAccountant

    if source.cost is None:
        return PknnAccountant(), opts.eps, opts.delta
    gen_events = DpdfdAccountant().load_state_dict(source.cost.accountant_state).events
    accountant = GeneratorPknnAccountant(events=list(gen_events))
    eps_gen = accountant.parts()[0].epsilon(delta=opts.delta / 2)
    if eps_gen >= opts.eps:
        raise DpconvertError(f"the query generator alone costs ε={eps_gen:.3f} at δ/2={opts.delta / 2:g}; raise --eps above it "
                             "or use --public-data / --query-generator prior")
    return accountant, opts.eps - eps_gen, opts.delta / 2


def _label_description(cfg) -> str:
    if cfg.labels == "soft":
        return f"soft: softmax(noisy histogram / ({cfg.label_temperature:g}·σ2)) — post-processing of the released noisy histogram"
    return "hard: argmax of the noisy histogram (seed 000)"


def _with_canaries(private, public_x, order, opts: ConvertOptions, num_classes: int):
    """(x, y, canaries): the private set, plus each canary with probability ½ when ``--canaries`` is given.

    Canaries are extra records: they do not weaken the guarantee of the real ones.
    """
    import torch

    if not opts.canaries:
        return private.x, private.y, None
    if opts.canaries < 2:
        raise DpconvertError("--canaries needs at least 2 canaries")
    from .canaries import inclusion_bits, make_canaries

    cx, cy = make_canaries(public_x, order, opts.canaries, num_classes, torch.Generator().manual_seed(opts.seed + 2))
    bits = inclusion_bits(opts.canaries)
    return torch.cat([private.x, cx[bits]]), torch.cat([private.y.long(), cy[bits]]), (cx, cy, bits)
