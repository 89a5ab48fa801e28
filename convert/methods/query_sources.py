"""Where Private-kNN's queries come from, and what they cost: a registry of query sources.

``public`` (unlabelled public images: free), ``prior`` (the data-independent random-field prior: free),
``saved`` (a generator saved by a DPDFD run: its DPDFD events are composed into the card), ``train`` (DPDFD trains
a generator in this run at a share of ε: the same), ``dpgan`` (a GAN with a DP critic trained on the private data
at a share of ε: record-level, its critic's events composed into the card). A source whose ``cost`` is None is independent of all private
data, so the record-level guarantee of the labels stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from dpconvert.errors import DpconvertError
from dpconvert.registry import Registry
from dpconvert.seeds import SUB_RUN_SHIFT

GENERATOR_QUERIES = 5000  # queries drawn from a generator or the prior when `queries` is not given
PKNN_PRIOR = "random_fields"  # `query_generator` prior without `prior` (the prior its benchmarks used)
IN_RUN_GENERATOR = "dafl"  # `query_generator` train without `generator`
IN_RUN_MIN_RELEASES = 2  # the generator learns between releases: one release would leave it untrained


@dataclass
class QuerySource:
    """Query images and what they cost (``cost`` is None when they are independent of all private data)."""

    x: object
    description: str
    not_covered: str
    cost: Optional[object] = None  # GeneratorCost of a DPDFD-trained generator
    generator_info: Optional[dict] = None
    extra_files: dict = field(default_factory=dict)  # the in-run generator, when `save_generator` asks for it


@dataclass(frozen=True)
class QuerySourceKind:
    """A registered source: how it makes its queries and what it declares about them, which is all Private-kNN's
    checks, plan and budget ask (a source added from outside the package needs nothing else: ``tests/test_registry_contracts.py``)."""

    load: Callable[..., QuerySource]  # (ctx, opts, teacher, n, rng, on_progress) → QuerySource
    chosen_by: str = "name"  # "name": `query_generator` NAME; "public_data": the public images; "file": a saved generator's FILE
    free: bool = False  # independent of all private data: the labels' guarantee stands alone, and the plan is the labels'
    eps_share: bool = False  # trained in this run at `generator_eps` of ε (at δ/2)
    configured_by: frozenset = frozenset()  # which option groups configure it: "prior", "generator_run" (DPDFD's), "gan"
    composed_accountant: Optional[str] = None  # the accountant its cost's events compose into with the labels'
    # the events it will record, (opts, ε share, δ) → events, known before it runs: σ2 is then calibrated against the
    # composed bound itself (joint RDP of record-level parts) instead of the labels' share alone
    planned_events: Optional[Callable] = None


QUERY_SOURCES: Registry[QuerySourceKind] = Registry("query source", param="query_generator")


def register_source(name: str, **declared):
    """Register the decorated loader as source ``name`` with its declarations (``QuerySourceKind``' fields)."""
    def wrap(load):
        QUERY_SOURCES.register(name)(QuerySourceKind(load, **declared))
        return load
    return wrap


def source_name(run, opts) -> str:
    """Which source the options ask for (checked by ``PrivateKnn.check`` before anything is loaded)."""
    if run.public_data:
        return chosen_by("public_data")
    if not opts.query_generator:
        named = ", ".join(name for name, kind in QUERY_SOURCES.items() if kind.chosen_by == "name")
        raise DpconvertError("Private-kNN needs queries", fix="give `public_data` PATH (unlabelled public images), or `query_generator` "
                             f"FILE (saved with `save_generator`) or one of: {named}", param="public_data")
    kind = QUERY_SOURCES.get(opts.query_generator) if opts.query_generator in QUERY_SOURCES else None
    return opts.query_generator if kind is not None and kind.chosen_by == "name" else chosen_by("file")


def chosen_by(how: str) -> str:
    """The source that ``how`` ("public_data", "file") chooses."""
    return next(name for name, kind in QUERY_SOURCES.items() if kind.chosen_by == how)


def generator_share(run, opts) -> float:
    """The in-run generator's part of ε (at δ/2): `generator_eps`, or half."""
    return opts.generator_eps if opts.generator_eps is not None else run.eps / 2


def load_queries(ctx, opts, teacher, on_progress=None) -> QuerySource:
    """The queries of the source the options name, from the run's ``queries`` seed stream (``ctx``: the RunContext)."""
    name = source_name(ctx.run, opts)
    return QUERY_SOURCES.get(name).load(ctx, opts, teacher, opts.queries or GENERATOR_QUERIES, ctx.stream("queries"), on_progress)


@register_source("public", chosen_by="public_data", free=True)
def _public(ctx, opts, teacher, n, rng, on_progress) -> QuerySource:
    run = ctx.run
    from dpconvert.io.data import load_data

    public = load_data(run.public_data, teacher.spec, **run.data_format())
    if len(public) == 0:
        raise DpconvertError(f"{run.public_data}: the public set is empty", fix="give public images to label")
    return QuerySource(public.x, f"public images {run.public_data} ({len(public)}, unlabelled)", "the public query set itself (assumed public)")


@register_source("prior", free=True, configured_by=frozenset({"prior"}))
def _prior(ctx, opts, teacher, n, rng, on_progress) -> QuerySource:
    from dpconvert.generators import PRIORS, create_generator
    from dpconvert.generators.saved import sample_queries

    name = opts.generator_run.prior or PKNN_PRIOR
    prior = create_generator(name, teacher.spec)
    return QuerySource(sample_queries(prior, n, teacher.spec.num_classes, rng), f"{PRIORS[name]} ({n} samples; data-independent)",
                       "nothing beyond the above: the queries are data-independent")


@register_source("saved", chosen_by="file", composed_accountant="pknn+dpdfd_generator")
def _saved(ctx, opts, teacher, n, rng, on_progress) -> QuerySource:
    from dpconvert.generators.saved import load_saved_generator, sample_queries
    from dpconvert.io.hashing import file_sha256

    path, spec = opts.query_generator, teacher.spec
    saved = load_saved_generator(path)
    if (saved.spec.shape, saved.spec.num_classes) != (spec.shape, spec.num_classes):
        raise DpconvertError(f"{path}: the generator makes {saved.spec.shape} inputs for {saved.spec.num_classes} classes, "
                             f"the teacher takes {spec.shape} and {spec.num_classes}", fix="save a generator for this teacher")
    if not saved.cost.mechanism:
        raise DpconvertError(f"{path}: saved by an older dpconvert without its mechanism facts", fix="save it again with `save_generator`", param="save_generator")
    if saved.cost.teacher_sha256 != teacher.sha256 or teacher.sha256 is None:
        raise DpconvertError(f"{path}: the generator was trained against another teacher (sha256 "
                             f"{str(saved.cost.teacher_sha256)[:12]}…, this one {str(teacher.sha256)[:12]}…) or the teacher has no file hash; "
                             "its cost only covers that teacher's answers", fix="save a generator trained with this teacher")
    info = {"file": Path(path).name, "file_sha256": file_sha256(path), "architecture": saved.name,
            "teacher_sha256": saved.cost.teacher_sha256, "dpdfd_epsilon_at_its_delta": saved.cost.card_epsilon,
            "its_delta": saved.cost.card_delta, "samples": n, "dpdfd": dict(saved.cost.mechanism)}
    return QuerySource(sample_queries(saved.generator, n, spec.num_classes, rng), f"DPDFD generator {Path(path).name} ({saved.name}; {n} samples)",
                       "the teacher beyond the generator's query-level DPDFD guarantee (see record_level_epsilon)",
                       cost=saved.cost, generator_info=info)


@register_source("train", eps_share=True, configured_by=frozenset({"prior", "generator_run"}),
                 composed_accountant="pknn+dpdfd_generator")
def _train(ctx, opts, teacher, n, rng, on_progress) -> QuerySource:
    """DPDFD in this run, calibrated to the generator's share of ε at δ/2; its generator then makes the queries.

    The generator is post-processing of DPDFD's noisy releases (it is trained against the student only), so its
    cost is exactly that run's accountant events, composed into the card like a saved generator's.
    """
    run = ctx.run
    from dpconvert.accounting.card_blocks import check_spent
    from dpconvert.generators.saved import COST_MECHANISM_KEYS, GeneratorCost, sample_queries

    from .base import METHODS

    share = generator_share(run, opts)
    g = opts.generator_run
    name = g.generator or IN_RUN_GENERATOR
    sub_run = replace(run, seed=run.seed + SUB_RUN_SHIFT, method="dpdfd", eps=share, delta=run.delta / 2, noise_multiplier=None,
                      public_data=None, private_data=None)
    sub_opts = replace(g, generator=name, releases=max(g.releases, IN_RUN_MIN_RELEASES), accounting="composed")  # a cost composed again
    def relay(info):  # the generator run's phases, named as its own; its time estimate and advances pass as they are
        on_progress({**info, "name": f"query generator: {info['name']}"} if info["kind"] == "phase" else info)

    relay = relay if on_progress else None
    from dpconvert.context import RunContext

    generator_method = METHODS.get("dpdfd")
    generator_method.check(sub_run, sub_opts)  # a run inside the run: the pipeline checked only the outer one
    dpdfd = generator_method.run(RunContext.build(sub_run, teacher.spec, ctx.world), sub_opts, teacher, None, relay)
    spent = check_spent(dpdfd.accountant, delta=dpdfd.delta, target=sub_run.eps)  # the generator's run bypasses the pipeline's check
    cost = GeneratorCost(dpdfd.accountant.state_dict(), "query", teacher.sha256, spent, dpdfd.delta,
                         {k: dpdfd.mechanism[k] for k in COST_MECHANISM_KEYS})
    info = {"file": None, "trained_in_this_run": True, "architecture": name, "teacher_sha256": teacher.sha256,
            "dpdfd_epsilon_at_its_delta": cost.card_epsilon, "its_delta": cost.card_delta, "samples": n, "dpdfd": dict(cost.mechanism)}
    return QuerySource(sample_queries(dpdfd.generator.eval(), n, teacher.spec.num_classes, rng),
                       f"DPDFD generator trained in this run ({name}; ε share {share:g} at δ/2; {n} samples)",
                       "the teacher beyond the generator's query-level DPDFD guarantee (see record_level_epsilon)",
                       cost=cost, generator_info=info, extra_files=dpdfd.extra_files)  # `save_generator`: written by the DPDFD run


@register_source("dpgan", eps_share=True, configured_by=frozenset({"gan"}), composed_accountant="pknn+dpgan",
                 planned_events=lambda opts, eps, delta: _dpgan_planned(opts.gan, eps, delta))
def _dpgan(ctx, opts, teacher, n, rng, on_progress) -> QuerySource:
    """A GAN with a DP critic (``methods/dpgan.py``) trained on the private records at the generator's share of ε (δ/2); its samples
    are the queries. The teacher is not involved: the cost is record-level, the critic's events."""
    run = ctx.run
    from dpconvert.generators.saved import sample_queries

    from .dpgan import DPGAN_GENERATOR, train_dpgan

    share = generator_share(run, opts)
    gan = train_dpgan(ctx, opts.gan, teacher.spec, share, run.delta / 2, on_progress)
    info = {"trained_in_this_run": True, "architecture": f"{DPGAN_GENERATOR} generator, DP critic ({gan.mechanism['critic']})", "samples": n,
            "dpgan_epsilon_at_its_delta": gan.epsilon, "its_delta": run.delta / 2, "dpgan": gan.mechanism}
    return QuerySource(sample_queries(gan.generator, n, teacher.spec.num_classes, rng),
                       f"DP-critic GAN trained on the private data in this run (ε share {share:g} at δ/2; {n} samples)",
                       "nothing beyond the above: the queries are post-processing of the DP critic", cost=gan, generator_info=info)


def _dpgan_planned(gan_opts, eps: float, delta: float) -> list:
    from .dpgan import planned_events

    return planned_events(gan_opts, eps, delta)
