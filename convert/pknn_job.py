"""The Private-kNN method of ``convert`` (ALGORITHMS.md §3): query source, budget, rounds, card blocks.

Registered in ``pipeline.METHODS`` as ``pknn``. The mechanism itself (subsampling,
noise, the accountant events) is ``private_knn.PknnMechanism``; this module
wires it to the query source, the privacy budget and the card.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .errors import DpconvertError
from .pipeline import METHODS, NOT_COVERED, ConvertOptions, MethodOutput

log = logging.getLogger("dpconvert")


@METHODS.register("pknn")
def run_pknn(teacher, opts: ConvertOptions, on_plan, on_progress) -> MethodOutput:
    """Private-kNN (ALGORITHMS.md §3): record-level on public or prior queries; composed with a saved generator's DPDFD cost."""
    import torch

    from .accounting import library_versions
    from .accounting.accountant import ADJACENCY_GENERATOR_PKNN, ADJACENCY_RECORD
    from .data import load_data
    from .features import batched_features, create_features
    from .noise import SEEDED_WARNING, mechanism_rng
    from .planning import plan_pknn
    from .private_knn import (PknnConfig, PknnMechanism, confident_pseudo_labels, histogram_targets, resolve_knn,
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
    _check_round_features(cfg)
    _check_query_flags(opts)
    private = load_data(opts.private_data, spec, require_labels=True, pixel_range=opts.pixel_range)
    n = len(private)
    # n and anything computed from it (a missing class, k against the expected subsample γ·n, δ against 1/n) may only
    # reach the operator's console: on the card, or as an abort, it would tell neighbouring data sets apart.
    _local_notes(n, cfg, opts.delta)
    if cfg.rounds < 1:
        raise DpconvertError("--rounds must be >= 1")
    threshold = cfg.threshold if cfg.threshold is not None else cfg.threshold_ratio * cfg.k

    def label_plan(eps_labels, delta_labels, queries):
        return plan_pknn(eps=eps_labels, delta=delta_labels, k=cfg.k, sampling_rate=cfg.sampling_rate, sigma1=cfg.sigma1,
                         threshold=threshold, sigma2=cfg.sigma2, num_classes=spec.num_classes, queries=queries, answered=queries)

    if opts.query_generator == "train":  # fail before minutes of DPDFD if what the generator leaves cannot pay for the labels
        label_plan(opts.eps - _generator_share(opts), opts.delta / 2, cfg.queries or GENERATOR_QUERIES)
    source = pknn_query_source(opts, spec, cfg, teacher=teacher, on_progress=on_progress)  # "train" runs DPDFD here
    knn = resolve_knn(cfg.knn, n)  # both searches are exact: the same votes, so the card need not say which ran
    total_q = min(cfg.queries or len(source.x), len(source.x))
    if total_q < cfg.rounds:
        raise DpconvertError(f"only {total_q} queries for {cfg.rounds} rounds; give more queries or fewer --rounds")
    warnings = []
    accountant, eps_labels, delta_labels = _pknn_budget(source, opts)
    # σ2 is fixed before any private data is touched, calibrated as if every query were answered:
    # the realised ε (answered queries only) can only be smaller.
    plan = label_plan(eps_labels, delta_labels, total_q)
    if cfg.sigma2 is not None and plan["epsilon"] > eps_labels:
        raise DpconvertError(f"--sigma2 {cfg.sigma2} gives ε={plan['epsilon']:.3f} > {eps_labels:.3f} if every query is answered; raise --sigma2 or ask fewer --queries")
    if source.cost is not None:  # the plan table shows both parts of the composition
        eps_gen = opts.eps - eps_labels
        plan["accountants"] = {"query generator, DPDFD at δ/2": eps_gen, **{f"labels, {k} at δ/2": v for k, v in plan["accountants"].items()}}
        plan.update(epsilon=eps_gen + plan["epsilon"], scope="query", adjacency=ADJACENCY_GENERATOR_PKNN, delta=opts.delta)
    plan["method_choice"] = opts.method_reason
    if on_plan:
        on_plan(plan)

    torch.manual_seed(opts.seed)
    rng, noise_info = mechanism_rng(opts.seed, seeded=opts.seeded_noise)  # subsampling and noise (convert/noise.py)
    if opts.seeded_noise:
        warnings.append(SEEDED_WARNING)
    train_rng = torch.Generator().manual_seed(opts.seed)
    order = torch.randperm(len(source.x), generator=train_rng)[:total_q]
    # with --canaries the mechanism sees the canaries as ordinary private records
    private_x, private_y, canaries = _with_canaries(private, source.x, order, opts, spec.num_classes)
    mech = PknnMechanism(private_y, spec.num_classes, k=cfg.k, sampling_rate=cfg.sampling_rate, sigma1=cfg.sigma1, threshold=threshold,
                         sigma2=plan["sigma2"], accountant=accountant, generator=rng, chunk=cfg.chunk, knn=knn)
    if on_progress:  # vote passes: screening for every query, the argmax for answered ones
        mech.on_chunk = lambda m: on_progress({"kind": "votes", "queries": m})
    per_round = order.tensor_split(cfg.rounds)
    phi = first_phi = create_features(cfg.features, spec, source.x)
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
                         minibatch=cfg.minibatch, generator=train_rng, balance=cfg.balance)
        phi = _next_round_features(cfg, student, first_phi)  # DP by post-processing: trained on public queries + DP labels only
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
                         lr=cfg.student_lr, minibatch=cfg.minibatch, generator=train_rng, balance=cfg.balance)
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
        extra_files=source.extra_files,
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
                    + ("; the query generator's DPDFD events (replayed from its file, or from this run) composed by basic composition, each part at δ/2" if composed else ""),
        },
        mechanism={
            "method": "private-knn", "k": cfg.k, "sampling_rate": cfg.sampling_rate, "sampling": "Poisson (independent per record, per query, per step)",
            "sigma1": cfg.sigma1, "threshold": threshold, "sigma2": plan["sigma2"], "queries_asked": asked, "queries_answered": answered_total,
            "rounds": cfg.rounds, "features": f"{getattr(first_phi, 'description', cfg.features)} (round 1), then the previous round's student"
                        + (f" beside {cfg.features} (weight {cfg.round_features_weight:g})" if cfg.round_features == "student+first" else ""),
            "knn_search": KNN_SEARCH, "public_queries": opts.public_data, "query_source": source.description, "labels": _label_description(cfg),
            **noise_info, "config": cfg.to_dict(),
            **({"query_generator": source.generator_info} if composed else {}),
        },
    )


KNN_SEARCH = "exact k nearest kept records under a fresh per-query Poisson mask (torch, or faiss for large private sets: the same votes)"


def _local_notes(n: int, cfg, delta: float) -> None:
    """Console-only advice that depends on the private-set size n (never on the card, never an abort)."""
    if cfg.k > cfg.sampling_rate * n / 2:
        log.warning("note (console only): --k %d is more than half the expected subsample γ·n = %.0f; many votes will come from "
                    "fewer than k records: lower --k or raise --sampling-rate", cfg.k, cfg.sampling_rate * n)
    if delta > 1.0 / max(n, 1):
        log.warning("note (console only): δ=%g is larger than 1/n for this private set; consider --delta %g", delta, 10 ** -len(str(n)))
GENERATOR_QUERIES = 5000  # default number of generator queries when --queries is not given


@dataclass
class QuerySource:
    """Private-kNN query images and what they cost (``cost`` is None when they are independent of all private data)."""

    x: object
    description: str
    not_covered: str
    cost: Optional[object] = None  # GeneratorCost of a DPDFD-trained generator
    generator_info: Optional[dict] = None
    extra_files: dict = field(default_factory=dict)  # the in-run generator, when --save-generator asks for it


def _check_query_flags(opts: ConvertOptions) -> None:
    from .pipeline import check_generator_path, check_prior_name

    if opts.public_data and opts.query_generator:
        raise DpconvertError("give one query source: --public-data PATH or --query-generator (FILE, prior or train), not both")
    if opts.prior and opts.query_generator not in ("prior", "train"):
        raise DpconvertError("--prior picks the data-free query prior: with --method pknn use it with --query-generator prior or train")
    if opts.prior:
        check_prior_name(opts.prior)
    if opts.distill_loss and opts.query_generator != "train":
        raise DpconvertError("--distill-loss is DPDFD's; with --method pknn it applies only to --query-generator train")
    if opts.generator_eps is not None and opts.query_generator != "train":
        raise DpconvertError("--generator-eps is the in-run generator's share of --eps; use it with --query-generator train")
    if opts.query_generator == "train":
        share = _generator_share(opts)
        if not 0 < share < opts.eps:
            raise DpconvertError(f"--generator-eps must be between 0 and --eps {opts.eps:g} (the rest labels the queries), got {share:g}")
    if opts.save_generator and opts.query_generator != "train":
        raise DpconvertError("with --method pknn, --save-generator saves the generator trained in this run: add --query-generator train")
    if opts.save_generator:
        check_generator_path(opts.save_generator, opts.out, True)


def _generator_share(opts: ConvertOptions) -> float:
    """The in-run generator's part of --eps (at δ/2): --generator-eps, or half."""
    return opts.generator_eps if opts.generator_eps is not None else opts.eps / 2


def pknn_query_source(opts: ConvertOptions, spec, cfg, teacher=None, on_progress=None) -> QuerySource:
    """Queries from --public-data, the data-independent prior, a saved DPDFD generator, or one trained now (--query-generator)."""
    import torch

    from .data import load_data

    if opts.public_data:  # the flags were checked by run_pknn (_check_query_flags) before the private data was loaded
        public = load_data(opts.public_data, spec, pixel_range=opts.pixel_range)
        if len(public) == 0:
            raise DpconvertError(f"{opts.public_data}: the public set is empty; give public images to label")
        return QuerySource(public.x, f"public images {opts.public_data} ({len(public)}, unlabelled)", "the public query set itself (assumed public)")
    if not opts.query_generator:
        raise DpconvertError("--method pknn needs queries: give --public-data PATH (unlabelled public images) or "
                             "--query-generator FILE (saved with --save-generator) or --query-generator prior")
    n = cfg.queries or GENERATOR_QUERIES
    rng = torch.Generator().manual_seed(opts.seed + 3)
    if opts.query_generator == "prior":  # data-independent: no cost, the record-level guarantee stands alone
        from dpconvert.generators import PRIORS, create_generator
        from dpconvert.generators.saved import sample_queries

        name = opts.prior or PKNN_PRIOR
        prior = create_generator(name, spec)
        return QuerySource(sample_queries(prior, n, spec.num_classes, rng), f"{PRIORS[name]} ({n} samples; data-independent)",
                           "nothing beyond the above: the queries are data-independent")
    if opts.query_generator == "train":
        return _train_query_generator(teacher, opts, n, rng, on_progress)
    from dpconvert.generators.saved import load_saved_generator, sample_queries

    from .hashing import file_sha256

    saved = load_saved_generator(opts.query_generator)
    if (saved.spec.shape, saved.spec.num_classes) != (spec.shape, spec.num_classes):
        raise DpconvertError(f"{opts.query_generator}: the generator makes {saved.spec.shape} inputs for {saved.spec.num_classes} classes, "
                             f"the teacher takes {spec.shape} and {spec.num_classes}; save a generator for this teacher")
    if not saved.cost.mechanism:
        raise DpconvertError(f"{opts.query_generator}: saved by an older dpconvert without its mechanism facts; save it again with --save-generator")
    if saved.cost.teacher_sha256 != teacher.sha256 or teacher.sha256 is None:
        raise DpconvertError(f"{opts.query_generator}: the generator was trained against another teacher (sha256 "
                             f"{str(saved.cost.teacher_sha256)[:12]}…, this one {str(teacher.sha256)[:12]}…) or the teacher has no file hash; "
                             "its cost only covers that teacher's answers: save a generator trained with this teacher")
    info = {"file": Path(opts.query_generator).name, "file_sha256": file_sha256(opts.query_generator), "architecture": saved.name,
            "teacher_sha256": saved.cost.teacher_sha256, "dpdfd_epsilon_at_its_delta": saved.cost.card_epsilon,
            "its_delta": saved.cost.card_delta, "samples": n, "dpdfd": dict(saved.cost.mechanism)}
    return QuerySource(sample_queries(saved.generator, n, spec.num_classes, rng),
                       f"DPDFD generator {Path(opts.query_generator).name} ({saved.name}; {n} samples)",
                       "the teacher beyond the generator's query-level DPDFD guarantee (see record_level_epsilon)",
                       cost=saved.cost, generator_info=info)


PKNN_PRIOR = "random_fields"  # --query-generator prior without --prior (the prior its benchmarks used, RESULTS.md §3)
IN_RUN_GENERATOR = "dafl"  # --query-generator train without --generator
IN_RUN_MIN_RELEASES = 2  # the generator learns between releases: one release would leave it untrained
IN_RUN_SEED_OFFSET = 1000


def _train_query_generator(teacher, opts: ConvertOptions, n: int, rng, on_progress) -> QuerySource:
    """DPDFD in this run, calibrated to the generator's share of ε at δ/2; its generator then makes the queries.

    The generator is post-processing of DPDFD's noisy releases (it is trained against the student only), so its
    cost is exactly that run's accountant events, composed into the card like a saved generator's.
    """
    from dataclasses import replace

    from dpconvert.generators.saved import COST_MECHANISM_KEYS, GeneratorCost, sample_queries

    from .pipeline import run_dpdfd

    share = _generator_share(opts)
    name = opts.generator or IN_RUN_GENERATOR
    # seed + IN_RUN_SEED_OFFSET: with seeded noise the generator's DPDFD stream must not replay Private-kNN's (seed + 1)
    sub = replace(opts, seed=opts.seed + IN_RUN_SEED_OFFSET, method="dpdfd", eps=share, delta=opts.delta / 2, noise_multiplier=None, generator=name,
                  public_data=None, releases=max(opts.releases, IN_RUN_MIN_RELEASES), method_reason="query generator for Private-kNN")
    relay = (lambda info: on_progress({**info, "kind": "query_generator", "stage": info["kind"], "epsilon_share": share})) if on_progress else None
    dpdfd = run_dpdfd(teacher, sub, None, relay)
    cost = GeneratorCost(dpdfd.accounting["state"], "query", teacher.sha256, dpdfd.guarantee["epsilon"], sub.delta,
                         {k: dpdfd.mechanism[k] for k in COST_MECHANISM_KEYS})
    info = {"file": None, "trained_in_this_run": True, "architecture": name, "teacher_sha256": teacher.sha256,
            "dpdfd_epsilon_at_its_delta": cost.card_epsilon, "its_delta": cost.card_delta, "samples": n, "dpdfd": dict(cost.mechanism)}
    return QuerySource(sample_queries(dpdfd.generator.eval(), n, teacher.spec.num_classes, rng),
                       f"DPDFD generator trained in this run ({name}; ε share {share:g} at δ/2; {n} samples)",
                       "the teacher beyond the generator's query-level DPDFD guarantee (see record_level_epsilon)",
                       cost=cost, generator_info=info, extra_files=dpdfd.extra_files)  # --save-generator: written by run_dpdfd's own path


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


def _next_round_features(cfg, student, first_phi):
    """φ for the next round: the student's features, or (``round_features="student+first"``) them beside the first map."""
    import torch
    import torch.nn.functional as F

    from .private_knn import student_features

    _check_round_features(cfg)
    phi_s = student_features(student)
    if cfg.round_features == "student":
        return phi_s
    return lambda x: F.normalize(torch.cat([first_phi(x), cfg.round_features_weight * phi_s(x)], 1), dim=1)


ROUND_FEATURES = ("student", "student+first")


def _check_round_features(cfg) -> None:
    if cfg.round_features not in ROUND_FEATURES:
        raise DpconvertError(f"unknown round_features {cfg.round_features!r} ({' or '.join(ROUND_FEATURES)})")


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
