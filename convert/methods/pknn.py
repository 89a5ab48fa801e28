"""Private-kNN ("Private-kNN: Practical Differential Privacy for Computer Vision"): record-level labels for queries.

Each query is labelled by the k nearest neighbours of a fresh Poisson subsample of the private set, with noisy
screening and a noisy argmax (``mechanisms/private_knn.py``: the only place the subsamples and the noise are
drawn). The queries come from a query source (``query_sources.py``); the student learns from the answered ones, and
its features become the next round's kNN space. This module holds the options, the budget, the rounds and the
card blocks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Optional

from dpconvert.errors import DpconvertError
from dpconvert.profiling import phase

from dpconvert.accounting.statements import COVERS_STUDENT_AND_LABELS
from dpconvert.accounting.plans import PknnPlan, PlanProgress

from .base import NOT_COVERED, Claims, Method, MethodOutput, register
from .dpdfd_options import DpdfdOptions
from dpconvert.option_fields import changed_options

from .pknn_options import KNN_SEARCH, PknnOptions
from .query_sources import GENERATOR_QUERIES, QUERY_SOURCES, chosen_by, generator_share, load_queries, source_name

log = logging.getLogger("dpconvert")

# How the card describes each composition of a query source's cost with the labels (``QuerySourceKind.composed_accountant``).
COMPOSITION_NOTE = {
    "pknn+dpdfd_generator": "; the query generator's DPDFD events (replayed from its file, or from this run) composed by basic composition, "
                            "each part at δ/2",
    "pknn+dpgan": "; the DP-critic GAN's events composed with the labels: the smaller of basic composition (each part at δ/2) and one "
                  "RDP composition of all events at δ (σ2 calibrated against this composed bound)",
}


@register
class PrivateKnn(Method):
    name = "pknn"
    Options = PknnOptions
    summary = "record-level Private-kNN"
    listed_at = 10
    distributed = True

    def check_distributed(self, run, opts: PknnOptions) -> None:
        if QUERY_SOURCES.get(source_name(run, opts)).eps_share:
            raise DpconvertError(f"`query_generator` {opts.query_generator} trains in one process only",
                                 fix="train it once without torchrun (save it with `save_generator`) and pass the FILE", param="query_generator")
        if opts.knn == "faiss":
            raise DpconvertError("`knn` faiss runs in one process only", fix="use `knn` exact under torchrun (its search is sharded)", param="knn")
        if opts.canaries:
            raise DpconvertError("`canaries` runs in one process only", fix="run the canary audit without torchrun", param="canaries")

    def options(self, values=None):
        """Options of the in-run generator's DPDFD (`releases`, `batch_size`, `generator`, `prior`, …) go to ``generator_run``."""
        values = dict(values or {})
        from dpconvert.option_fields import option_names

        own = option_names(PknnOptions)
        dpdfd = {k: values.pop(k) for k in list(values) if k not in own and k in option_names(DpdfdOptions)}
        if dpdfd:
            values["generator_run"] = replace(values.get("generator_run") or DpdfdOptions(), **dpdfd)
        return super().options(values)

    def check(self, run, opts: PknnOptions, out=None) -> None:
        """The query flags, before the private data (or minutes of DPDFD) are touched."""
        g = opts.generator_run
        if not run.private_data:
            raise DpconvertError("Private-kNN needs the private training data", fix="give `private_data` PATH (labelled)", param="private_data")
        if run.noise_multiplier is not None:
            raise DpconvertError("`noise_multiplier` is DPDFD's σ", fix="give `eps` (Private-kNN calibrates σ2 to it) or `sigma2`", param="noise_multiplier")
        if run.public_data and opts.query_generator:
            raise DpconvertError(fix="give one query source: `public_data` PATH or `query_generator` (FILE, prior or train), not both", param="public_data")
        source = source_name(run, opts)
        takes = QUERY_SOURCES.get(source).configured_by
        if g.prior and "prior" not in takes:
            raise DpconvertError("`prior` picks the data-free query prior", fix="use it with `query_generator` prior or train (Private-kNN)", param="prior")
        if g.prior:
            from .dpdfd import check_prior_name

            check_prior_name(g.prior)
        changed = [k for k in changed_options(g) if k not in ("prior", "save_generator")]
        if changed and "generator_run" not in takes:
            raise DpconvertError(f"`{changed[0]}` is DPDFD's (with Private-kNN it configures the generator trained in the run)", fix="add `query_generator` train or drop it", param="query_generator")
        if opts.generator_eps is not None and not QUERY_SOURCES.get(source).eps_share:
            raise DpconvertError("`generator_eps` is the in-run generator's share of `eps`", fix="use it with `query_generator` train or dpgan", param="generator_eps")
        gan_changed = changed_options(opts.gan)  # a critic's own options are checked by GanOptions itself
        if gan_changed and "gan" not in takes:
            raise DpconvertError(f"`gan_{gan_changed[0]}` configures the DP-critic GAN", fix="use it with `query_generator` dpgan", param="query_generator")
        if QUERY_SOURCES.get(source).eps_share and not 0 < generator_share(run, opts) < run.eps:
            raise DpconvertError(fix=f"`generator_eps` must be between 0 and `eps` {run.eps:g} (the rest labels the queries), "
                                 f"got {generator_share(run, opts):g}", param="generator_eps")
        if g.save_generator and "generator_run" not in takes:
            raise DpconvertError("with Private-kNN, `save_generator` saves the generator trained in this run", fix="add `query_generator` train", param="save_generator")
        if g.save_generator:
            from dpconvert.generators.saved import check_generator_path

            check_generator_path(g.save_generator, out, True, run.force)

    def plan(self, run, opts: PknnOptions, spec, queries: Optional[int] = None) -> PknnPlan:
        """σ2 for `queries` answered queries (default: ``opts.queries``, else GENERATOR_QUERIES from a query generator),
        as the run calibrates it: labels alone for cost-free queries (public images, the prior), composed with a DP-critic
        GAN's planned events for `query_generator` dpgan. A DPDFD-trained or saved generator's realised cost is known only
        after it ran (its file records it): the run's plan table shows the composition then."""
        kind = QUERY_SOURCES.get(source_name(run, opts) if opts.query_generator else chosen_by("public_data"))  # default: public images
        if kind.chosen_by == "public_data":  # every public image, or `queries` of them
            total = min(opts.queries or queries, queries) if queries is not None else (opts.queries or GENERATOR_QUERIES)
        else:
            total = opts.queries or queries or GENERATOR_QUERIES
        if kind.free:
            return self._check_sigma2(opts, self.label_plan(opts, spec.num_classes, run.eps, run.delta, total), run.eps)
        if kind.planned_events is not None and opts.sigma2 is None:
            return self._joint_budget(run, opts, self._planned_cost(run, opts, kind), spec.num_classes, total)[1]
        raise DpconvertError(f"`query_generator` {opts.query_generator}: its cost is known once it has run",
                             fix="convert prints the composed plan before any label is released (or plan the labels alone with `public_data`-sized `queries`)", param="query_generator")

    @staticmethod
    def _planned_cost(run, opts: PknnOptions, kind):
        """The composed accountant holding the events a source trained in this run will record (known before it runs)."""
        from dpconvert.accounting import ACCOUNTANTS

        return ACCOUNTANTS.get(kind.composed_accountant)(events=kind.planned_events(opts, generator_share(run, opts), run.delta / 2))

    def realised_plan(self, plan: PknnPlan, opts: PknnOptions, num_classes: int, answered: Optional[int], n: Optional[int]) -> PknnPlan:
        """ε when only ``answered`` of the queries pass the screening (σ2 is calibrated for all of them), δ ≤ 1/n checked."""
        if answered is None and n is None:
            return plan
        from dpconvert.accounting.planning import plan_pknn

        total = plan.queries_asked
        realised = plan_pknn(eps=None, delta=plan.delta, k=opts.k, sampling_rate=opts.sampling_rate, sigma1=opts.sigma1,
                             threshold=opts.threshold_value, sigma2=plan.sigma2, num_classes=num_classes, queries=total,
                             answered=total if answered is None else answered, n=n)
        return replace(realised, calibrated=plan.calibrated, target_epsilon=plan.target_epsilon)

    @staticmethod
    def _check_sigma2(opts: PknnOptions, plan: PknnPlan, eps_labels: float) -> PknnPlan:
        if opts.sigma2 is not None and plan.epsilon > eps_labels:
            raise DpconvertError(f"`sigma2` {opts.sigma2} gives ε={plan.epsilon:.3f} > {eps_labels:.3f} if every query is answered",
                                 fix="raise `sigma2` or ask fewer `queries`", param="sigma2")
        return plan

    def label_plan(self, opts: PknnOptions, num_classes: int, eps: float, delta: float, queries: int) -> PknnPlan:
        from dpconvert.accounting.planning import plan_pknn

        return plan_pknn(eps=eps, delta=delta, k=opts.k, sampling_rate=opts.sampling_rate, sigma1=opts.sigma1, threshold=opts.threshold_value,
                         sigma2=opts.sigma2, num_classes=num_classes, queries=queries, answered=queries)

    def run(self, ctx, opts: PknnOptions, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        import torch

        from dpconvert.mechanisms.private_knn import PrivateKnnRounds

        run = ctx.run  # the pipeline checked run and opts before loading anything (Method.check)
        spec = teacher.spec
        release = PrivateKnnRounds(ctx.private, ctx.world)  # read first: a bad private set fails before the queries' work
        _local_notes(release.num_records, opts, run.delta)  # n may reach the operator's console, never the card or an abort
        self._check_budget_before_training(run, opts, spec.num_classes)
        with phase("queries"):
            source = load_queries(ctx, opts, teacher, on_progress)
        total_q = min(opts.queries or len(source.x), len(source.x))
        if total_q < opts.rounds:
            raise DpconvertError(f"only {total_q} queries for {opts.rounds} rounds", fix="give more `queries` or fewer `rounds`", param="queries")
        accountant, plan = self._budget(run, opts, source, spec.num_classes, total_q)
        if on_plan:  # the vote bar: the screening of every query, then the argmax of the answered ones
            on_plan(replace(plan, progress=PlanProgress("Private-kNN votes", 2 * plan.queries_asked, "votes")))
        torch.manual_seed(run.seed)
        warnings = list(ctx.noise.warnings)
        train_rng = ctx.stream("training")
        order = torch.randperm(len(source.x), generator=train_rng)[:total_q]
        canaries = _canaries(source.x, order, ctx, opts, spec.num_classes)
        votes = (lambda m: on_progress({"kind": "votes", "queries": m})) if on_progress else None  # screening, then the argmax
        release.start(spec.num_classes, canaries, knn=opts.knn, on_chunk=votes, k=opts.k, sampling_rate=opts.sampling_rate, sigma1=opts.sigma1,
                      threshold=opts.threshold_value, sigma2=plan.sigma2, accountant=accountant, noise=ctx.noise, chunk=opts.chunk)
        student, student_name, first_phi, rounds = self._rounds(run, opts, spec, source, order, release, train_rng, on_progress)
        audit = _canary_audit(student, canaries, run.delta, accountant.epsilon(delta=run.delta), warnings)
        return MethodOutput(student=student, student_name=student_name, probe=source.x[: run.parity_inputs], rounds=rounds, warnings=warnings,
                            audit=audit, extra_files=source.extra_files, accountant=accountant, delta=run.delta,
                            claims=self._claims(run, source, accountant, plan),
                            mechanism=self._mechanism_block(run, opts, source, accountant, plan, ctx.noise.card_fields, first_phi))

    # ------------------------------------------------------------ pieces of run
    def _budget(self, run, opts: PknnOptions, source, num_classes: int, total_q: int):
        """(accountant, plan): σ2 fixed before any private data is used, calibrated as if every query were answered
        (the realised ε, answered queries only, can only be smaller); a generator's cost is composed in at δ/2 each."""
        from dpconvert.accounting import ACCOUNTANTS, PknnAccountant

        kind = QUERY_SOURCES.get(source_name(run, opts))
        if source.cost is None:
            accountant, eps_labels, delta_labels = PknnAccountant(), run.eps, run.delta
        else:
            cost_kind = source.cost.accountant_state["accountant"]
            events = list(ACCOUNTANTS.get(cost_kind)().load_state_dict(source.cost.accountant_state).events)
            accountant = ACCOUNTANTS.get(kind.composed_accountant)(events=events)
            eps_gen = accountant.parts()[0].epsilon(delta=run.delta / 2)
            if eps_gen >= run.eps:
                raise DpconvertError(f"the query generator alone costs ε={eps_gen:.3f} at δ/2={run.delta / 2:g}",
                                     fix="raise `eps` above it or use `public_data` / `query_generator` prior", param="eps")
            eps_labels, delta_labels = run.eps - eps_gen, run.delta / 2
        if source.cost is not None and kind.planned_events is not None and opts.sigma2 is None:
            return self._joint_budget(run, opts, accountant, num_classes, total_q)
        plan = self._check_sigma2(opts, self.label_plan(opts, num_classes, eps_labels, delta_labels, total_q), eps_labels)
        if source.cost is not None:  # the plan table shows both parts of the composition
            eps_gen = run.eps - eps_labels
            plan = replace(plan, accountants={f"query generator ({cost_kind}) at δ/2": eps_gen, **{f"labels, {k} at δ/2": v for k, v in plan.accountants.items()}},
                           epsilon=eps_gen + plan.epsilon, scope=accountant.scope, adjacency=accountant.adjacency, delta=run.delta)
        return accountant, plan

    def _check_budget_before_training(self, run, opts: PknnOptions, num_classes: int) -> None:
        """Fail before minutes of generator training if what the generator leaves cannot pay for the labels."""
        kind, queries = QUERY_SOURCES.get(source_name(run, opts)), opts.queries or GENERATOR_QUERIES
        if kind.eps_share and kind.planned_events is not None and opts.sigma2 is None:
            self._joint_budget(run, opts, self._planned_cost(run, opts, kind), num_classes, queries)
        elif kind.eps_share:
            self.label_plan(opts, num_classes, run.eps - generator_share(run, opts), run.delta / 2, queries)

    def _joint_budget(self, run, opts: PknnOptions, accountant, num_classes: int, total_q: int):
        """σ2 for a record-level generator whose events compose with the labels' in one accountant: the smallest σ2
        whose composed ε (the accountant's own bound: the smaller of basic and joint RDP composition), with every
        query answered, is within `eps`. Calibrating the labels alone at ε − ε_generator by basic composition would
        leave the joint bound's slack unspent (measured: 0.68 for a target of 1)."""
        from dpconvert.accounting.calibrate import smallest_sigma

        def planned(sigma2: float):
            acc = type(accountant)(events=list(accountant.events))
            acc.record("pknn_screening", count=total_q, k=opts.k, num_classes=num_classes, sigma1=opts.sigma1,
                       threshold=opts.threshold_value, sampling_rate=opts.sampling_rate)
            acc.record("pknn_argmax", count=total_q, sigma2=sigma2, sampling_rate=opts.sampling_rate, num_classes=num_classes)
            return acc

        floor = planned(1e6).epsilon(delta=run.delta)
        if floor >= run.eps:
            raise DpconvertError(f"the query generator and the screening alone cost ε={floor:.3f}", fix="raise `eps`, lower `generator_eps` or raise `sigma1`", param="eps")
        sigma2 = smallest_sigma(lambda s2: planned(s2).epsilon(delta=run.delta), run.eps, rel_tol=1e-3)
        plan = self.label_plan(replace(opts, sigma2=sigma2), num_classes, None, run.delta / 2, total_q)
        gen, _ = accountant.parts()
        eps_all = planned(sigma2).epsilons(delta=run.delta)
        accountants = {"query generator at δ/2": gen.epsilon(delta=run.delta / 2), **{f"labels, {k} at δ/2": v for k, v in plan.accountants.items()},
                       **{f"composed: {k}": v for k, v in accountant.whole_bounds(eps_all).items()}}
        plan = replace(plan, accountants=accountants, epsilon=eps_all["epsilon"], calibrated=True, target_epsilon=run.eps, scope=accountant.scope,
                       adjacency=accountant.adjacency, delta=run.delta)
        return accountant, plan

    def _rounds(self, run, opts: PknnOptions, spec, source, order, release, train_rng, on_progress):
        """Label each round's queries (the kernel's ``PrivateKnnRounds``), retrain the student on everything answered so
        far (post-processing), refine φ with it."""
        import torch

        from dpconvert.distill.features import create_features
        from dpconvert.mechanisms.private_knn import histogram_targets, train_classifier
        from dpconvert.students import create_student, default_student_name

        first_phi = create_features(opts.features, spec, source.x)
        student_name = run.student or default_student_name(spec, run.device)
        xs, ys, rounds, student, mech = [], [], [], None, release.mech
        for r, idx in enumerate(order.tensor_split(opts.rounds), 1):
            t0 = time.perf_counter()
            qx = source.x[idx]
            answered, noisy = release.label(opts, qx, first_phi, student)
            xs.append(qx[answered])
            ys.append(histogram_targets(noisy, opts.labels, opts.label_temperature, mech.sigma2))
            student = create_student(student_name, spec)
            with phase("student training", items=opts.epochs * sum(len(x) for x in xs)):
                train_classifier(student, torch.cat(xs), torch.cat(ys), epochs=opts.epochs, lr=opts.student_lr, minibatch=opts.minibatch,
                                 generator=train_rng, balance=opts.balance, world=mech.world)
            info = {"kind": "round", "round": r, "asked": len(idx), "answered": int(answered.sum()), "seconds": time.perf_counter() - t0,
                    "epsilon": mech.accountant.epsilon(delta=run.delta)}
            rounds.append(info)
            if on_progress:
                on_progress(info)
        return student, student_name, first_phi, rounds

    def _claims(self, run, source, accountant, plan) -> Claims:
        composed = source.cost is not None
        return Claims(covers=list(COVERS_STUDENT_AND_LABELS), not_covered=NOT_COVERED + [source.not_covered], calibrated=plan.calibrated,
                      target_epsilon=run.eps,
                      note="screening charged for every query; noisy argmax (independent Poisson subsample) only for answered queries; "
                           "σ2 calibrated as if every query were answered" + (COMPOSITION_NOTE[accountant.name] if composed else ""))

    def _mechanism_block(self, run, opts: PknnOptions, source, accountant, plan, noise_info, first_phi) -> dict:
        features = (f"{getattr(first_phi, 'description', opts.features)} (round 1), then the previous round's student"
                    + (f" beside {opts.features} (weight {opts.round_features_weight:g})" if opts.round_features == "student+first" else ""))
        return {
            "method": self.name, "k": opts.k, "sampling_rate": opts.sampling_rate, "sampling": "Poisson (independent per record, per query, per step)",
            "sigma1": opts.sigma1, "threshold": opts.threshold_value, "sigma2": plan.sigma2,
            "queries_asked": accountant.count("pknn_screening"), "queries_answered": accountant.count("pknn_argmax"),
            "rounds": opts.rounds, "features": features, "knn_search": KNN_SEARCH, "public_queries": run.public_data,
            "query_source": source.description, "labels": _label_description(opts), **noise_info, "config": {**opts.to_dict(), "seed": run.seed},
            **({"query_generator": source.generator_info} if source.cost is not None else {}),
        }


def _local_notes(n: int, opts: PknnOptions, delta: float) -> None:
    """Console-only advice that depends on the private-set size n: on the card, or as an abort, n (or anything computed
    from it: a missing class, k against the expected subsample γ·n, δ against 1/n) would tell neighbouring data sets apart."""
    if opts.k > opts.sampling_rate * n / 2:
        log.warning("note (console only): `k` %d is more than half the expected subsample γ·n = %.0f; many votes will come from "
                    "fewer than k records: lower `k` or raise `sampling_rate`", opts.k, opts.sampling_rate * n)
    if delta > 1.0 / max(n, 1):
        log.warning("note (console only): δ=%g is larger than 1/n for this private set; consider `delta` %g", delta, 10 ** -len(str(n)))


def _label_description(opts: PknnOptions) -> str:
    if opts.labels == "soft":
        return f"soft: softmax(noisy histogram / ({opts.label_temperature:g}·σ2)) — post-processing of the released noisy histogram"
    return "hard: argmax of the noisy histogram (the paper's)"


def _canaries(public_x, order, ctx, opts: PknnOptions, num_classes: int):
    """(canary x, y, inclusion bits) when `canaries` is given, else None: the kernel adds each canary to the private set
    with probability ½ (extra records: they do not weaken the guarantee of the real ones)."""
    if not opts.canaries:
        return None
    from dpconvert.auditing.canaries import inclusion_bits, make_canaries

    cx, cy = make_canaries(public_x, order, opts.canaries, num_classes, ctx.stream("canaries"))
    return cx, cy, inclusion_bits(opts.canaries)


def _canary_audit(student, canaries, delta: float, epsilon: float, warnings: list) -> Optional[dict]:
    """The one-run empirical lower bound; the inclusion bits never leave this function, only the bound does."""
    if canaries is None:
        return None
    from dpconvert.auditing.canaries import audit_scores, canary_scores

    cx, cy, bits = canaries
    res = audit_scores(canary_scores(student, cx, cy), bits.numpy(), delta=delta)
    if res.epsilon_lower_bound > epsilon:
        warnings.append(f"canary audit: empirical ε lower bound {res.epsilon_lower_bound:.3f} exceeds the card's ε {epsilon:.3f} "
                        "(expected in ≤ 5 % of runs of a correct mechanism); investigate before release")
    return {"kind": "empirical — evidence, not a DP guarantee", "canary": res.to_dict()}
