"""Adding a method touches its own module and nothing else (#49): a small record-level method written here, in a test
module — Gaussian noisy class means with a nearest-mean student — declares its options, plan, run, card name, its
accountant and its card check, registers them, and runs through the pipeline (plan, run, ONNX export, card) to a
card the audit passes; nothing in ``convert/`` names it."""

from __future__ import annotations

import json
import math
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass

import pytest
import torch

from dpconvert.accounting import ACCOUNTANTS, Accountant, gaussian
from dpconvert.accounting.adjacency import ADJACENCY_RECORD
from dpconvert.accounting.calibrate import smallest_sigma
from dpconvert.accounting.plans import Plan
from dpconvert.accounting.statements import COVERS_STUDENT
from dpconvert.auditing.card_checks import CHECKS
from dpconvert.methods import METHODS
from dpconvert.methods.base import NOT_COVERED, Claims, Method, MethodOutput, noise_probe
from dpconvert.option_fields import option
from typing import ClassVar


@dataclass
class NoisyMeansAccountant(Accountant):
    """One Gaussian release per event (``gaussian_release``: multiplier sigma), composed exactly."""

    name: str = "noisy_means_test"
    mechanisms: tuple = ("gaussian_release",)
    scope: str = "record"
    adjacency: str = ADJACENCY_RECORD
    covers: ClassVar[tuple] = tuple(COVERS_STUDENT)

    def epsilons(self, *, delta: float) -> dict:
        s = gaussian.composed_multiplier([(e.params["sigma"], e.count) for e in self.events]) if self.events else math.inf
        eps = gaussian.epsilon(delta, s) if self.events else 0.0
        return {"analytic_gaussian": eps, "epsilon": eps}

    def private_records_epsilon(self, *, delta: float) -> float:
        return self.epsilon(delta=delta)


def check_noisy_means(p, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    p.check(m.get("method") == NoisyClassMeans.name, "mechanism.method", f"{m.get('method')!r} but the events are noisy class means")
    sigmas = [e.params["sigma"] for e in accountant.events]
    p.check(len(sigmas) == 1 and m.get("sigma") == sigmas[0], "mechanism.sigma", f"{m.get('sigma')!r} disagrees with the events {sigmas}")


@dataclass(kw_only=True)
class NoisyMeansPlan(Plan):
    card_keys: ClassVar[dict] = {"sigma": "sigma"}
    sigma: float

    def mechanism_rows(self) -> list:
        return [("noise multiplier σ", f"{self.sigma:.4f}")]


@dataclass
class NoisyMeansOptions:
    clip: float = option(1.0, help="Per-record L2 norm bound C (records are scaled down to it).")


class NearestMean(torch.nn.Module):
    """Logits x·μ_k − ½‖μ_k‖² on the input scaled to norm ≤ C, as the records were."""

    def __init__(self, means: torch.Tensor, clip: float) -> None:
        super().__init__()
        self.means = torch.nn.Parameter(means, requires_grad=False)
        self.clip = clip

    def forward(self, x):
        x = x.flatten(1)
        x = x / (x.norm(dim=1, keepdim=True) / self.clip).clamp(min=1.0)
        return x @ self.means.T - 0.5 * (self.means ** 2).sum(1)


class NoisyClassMeans(Method):
    name = "noisy_means_test"
    Options = NoisyMeansOptions
    summary = "record-level Gaussian noisy class means (a test's method)"

    def plan(self, run, opts, spec, queries=None) -> NoisyMeansPlan:
        sigma = smallest_sigma(lambda s: gaussian.epsilon(run.delta, s), run.eps)
        eps = gaussian.epsilon(run.delta, sigma)
        return NoisyMeansPlan(method=self.name, sigma=sigma, epsilon=eps, delta=run.delta, calibrated=True, target_epsilon=run.eps,
                              accountants={"analytic_gaussian": eps}, scope="record", adjacency=ADJACENCY_RECORD)

    def run(self, ctx, opts, teacher, on_plan=None, on_progress=None) -> MethodOutput:
        spec, plan = teacher.spec, self.plan(ctx.run, opts, teacher.spec)
        if on_plan:
            on_plan(plan)
        data = ctx.private.open_records()
        x = data.x.flatten(1)
        x = x / (x.norm(dim=1, keepdim=True) / opts.clip).clamp(min=1.0)
        onehot = torch.nn.functional.one_hot(data.y.long(), spec.num_classes).float()
        # one record moves one class row by (x, C): L2 sensitivity C·√2, so noise std σ·C·√2 is a Gaussian of multiplier σ
        stats = torch.cat([onehot.T @ x, opts.clip * onehot.sum(0)[:, None]], 1)
        noisy = stats + torch.randn(stats.shape, generator=ctx.noise.generator) * plan.sigma * opts.clip * math.sqrt(2)
        accountant = NoisyMeansAccountant()
        accountant.record("gaussian_release", sigma=plan.sigma)
        means = noisy[:, :-1] / (noisy[:, -1:] / opts.clip).clamp(min=1.0)
        return MethodOutput(
            student=NearestMean(means, opts.clip), student_name="nearest_mean", probe=noise_probe(spec, ctx.run), rounds=[],
            warnings=list(ctx.noise.warnings), accountant=accountant, delta=ctx.run.delta,
            claims=Claims(covers=list(COVERS_STUDENT), not_covered=list(NOT_COVERED), calibrated=True, target_epsilon=ctx.run.eps),
            mechanism={"method": self.name, "sigma": plan.sigma, "clip": opts.clip, **ctx.noise.card_fields,
                       "config": {**asdict(opts), "seed": ctx.run.seed}})


@contextmanager
def registered(registry, name: str, entry):
    registry.register(name)(entry)
    try:
        yield entry
    finally:
        registry.remove(name)


@pytest.fixture
def noisy_means():
    import dpconvert.cli.app  # noqa: F401  (the commands, built from the registry at import, stay as the other tests see them)

    with ExitStack() as stack:
        stack.enter_context(registered(ACCOUNTANTS, NoisyMeansAccountant.name, NoisyMeansAccountant))
        stack.enter_context(registered(CHECKS, NoisyMeansAccountant.name, check_noisy_means))
        yield stack.enter_context(registered(METHODS, NoisyClassMeans.name, NoisyClassMeans()))


def test_a_method_written_outside_the_package_runs_and_passes_the_audit(noisy_means, tmp_path, cli):
    import dpconvert

    out = tmp_path / "means.onnx"
    plans = []
    result = dpconvert.convert("builtin:digits", out=out, method=NoisyClassMeans.name, private_data="builtin:digits:train", eps=1.0,
                               eval_data="builtin:digits:test", on_plan=plans.append)
    card = json.loads(out.with_name("means.onnx.card.json").read_text())
    g = card["guarantee"]
    assert card["mechanism"]["method"] == NoisyClassMeans.name and card["accounting"]["accountant"] == "noisy_means_test"
    assert g["scope"] == "record" and g["epsilon"] == pytest.approx(1.0, rel=1e-3) and g["record_level_epsilon"] == g["epsilon"]
    assert plans and plans[0].sigma == card["mechanism"]["sigma"]  # the plan printed is the run's
    assert card["utility"]["student_accuracy"] > 0.8, card["utility"]  # a useful student at ε = 1 on 8×8 digits (90.7 % here)
    assert result.card.data["guarantee"] == g
    code, outp, _ = cli("audit", out)
    assert code == 0, outp
    forged = dict(card, mechanism={**card["mechanism"], "sigma": card["mechanism"]["sigma"] * 3})
    from dpconvert.auditing.card_checks import check_card

    assert "mechanism.sigma" in {w for w, _ in check_card(forged)[1]}


def test_the_contracts_help_and_auto_pick_the_method_up(noisy_means, tmp_path):
    """The contract every built-in method meets (``dpconvert.plan`` plans what ``convert`` runs: the plan's
    ``card_keys``), the `--method` help and the listed order see the new method; `auto` never picks it (it declares
    no ``auto_reason``)."""
    from dpconvert.cli.app import method_help
    from dpconvert.methods import choose_method, method_order
    from dpconvert.options import RunOptions
    from tests.test_plan_is_the_run import check_plan_is_the_run

    check_plan_is_the_run(NoisyClassMeans.name, dict(private_data="builtin:digits:train"), {}, 1.0, tmp_path)
    assert method_order()[-1] == NoisyClassMeans.name and f"{NoisyClassMeans.name}: {NoisyClassMeans.summary}" in method_help()
    assert choose_method(RunOptions(method="auto", private_data="x"))[0] == "dpsgd"


def test_a_method_that_runs_other_noise_than_it_planned_writes_nothing(noisy_means, tmp_path, monkeypatch):
    """The pipeline compares the plan's ``card_keys`` with the mechanism block after every run: a method whose
    mechanism drifted from its plan is a bug (``InternalError``), and no file is written."""
    import dpconvert
    from dpconvert.errors import InternalError

    real = NoisyClassMeans.plan
    monkeypatch.setattr(NoisyClassMeans, "run", _drifting(NoisyClassMeans.run, real))
    with pytest.raises(InternalError, match="other parameters than its plan"):
        dpconvert.convert("builtin:digits", out=tmp_path / "m.onnx", method=NoisyClassMeans.name, private_data="builtin:digits:train", eps=1.0)
    assert list(tmp_path.iterdir()) == []


def _drifting(run, plan):
    """The method's run, reporting a plan with half its σ: what it ran is no longer what it printed."""
    import dataclasses

    def drifted(self, ctx, opts, teacher, on_plan=None, on_progress=None):
        return run(self, ctx, opts, teacher, lambda p: on_plan(dataclasses.replace(p, sigma=p.sigma / 2)), on_progress)
    return drifted


def test_the_registries_are_clean_again_after_the_test_method():
    assert NoisyClassMeans.name not in METHODS and NoisyMeansAccountant.name not in ACCOUNTANTS and NoisyMeansAccountant.name not in CHECKS
