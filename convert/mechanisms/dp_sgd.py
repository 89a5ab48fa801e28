"""DP-SGD through Opacus: per-example clipping and Gaussian noise on Poisson-sampled lots.

Opacus does the per-example gradients (``GradSampleModule``), the clipping and the noise (``DPOptimizer``) and
the Poisson sampling (its ``UniformWithReplacementSampler``); this object wires them to dpconvert's secret generator and its
accountant. The optimizer that added the noise reports each step (σ, C, q as it used them) through its step
hook, so the card's events are what ran, not what was planned.

The learning rate divides the noisy gradient sum by an expected lot size q·ñ with ñ = n + N(0, σ_n²): Opacus
would use the true n, which would let the private-set size enter the model outside the accounting.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from dpconvert.profiling import median_seconds, phase

from dpconvert.mechanisms.noise import as_generator


class DpSgd:
    def __init__(self, module: torch.nn.Module, *, sigma: float, clip: float, sampling_rate: float, steps: int, count_sigma: float,
                 lr: float, momentum: float, accountant, noise) -> None:
        """``noise``: the run's ``NoiseStream`` (or a bare generator): the lots and the noise are drawn from it."""
        self.module, self.sigma, self.clip, self.sampling_rate, self.steps = module, sigma, clip, sampling_rate, steps
        self.count_sigma, self.lr, self.momentum = count_sigma, lr, momentum
        self.accountant, self.generator = accountant, as_generator(noise)

    def noisy_count(self, n: int) -> float:
        """ñ = n + N(0, σ_n²) (sensitivity 1), recorded; only the learning-rate scale uses it."""
        noise = float(torch.normal(0.0, self.count_sigma, (1,), generator=self.generator))
        self.accountant.record("gaussian_count", sigma=self.count_sigma)
        return n + noise

    def expected_lot(self, noisy_n: float) -> int:
        """q·ñ: the lot size the learning rate is scaled by (and the estimate is timed on)."""
        return max(1, round(self.sampling_rate * noisy_n))

    def fit(self, x: torch.Tensor, y: torch.Tensor, on_step: Optional[Callable[[int], None]] = None,
            noisy_n: Optional[float] = None) -> torch.nn.Module:
        """Train ``module`` in place for ``steps`` noisy steps on (x, y); returns the trained module (unwrapped).
        ``noisy_n``: ñ when the caller drew it already (:meth:`noisy_count`), else it is drawn here."""
        expected = self.expected_lot(self.noisy_count(len(x)) if noisy_n is None else noisy_n)
        model, opt, criterion = self._engine(expected)
        opt.attach_step_hook(self._record)
        y = y.long()
        model.train()
        with _quiet_opacus():
            for step, idx in enumerate(poisson_lots(len(x), self.sampling_rate, self.steps, self.generator), 1):
                xb, yb = x[idx], y[idx]
                opt.zero_grad()
                out = model(xb)
                # an empty lot still takes its noisy step (skipping it would depend on the data); its loss is 0
                loss = criterion(out, yb) if len(xb) else out.sum() * 0.0
                loss.backward()
                opt.step()
                if on_step:
                    on_step(step)
        return model._module

    def step_seconds(self, lot: int, shape) -> float:
        """One step's time on this machine, timed on a copy of the module and a lot of ``lot`` random inputs: ``lot`` is
        q·ñ, so the estimate is post-processing of the noisy count (timing the real lots would time n). The copy's noise
        comes from its own generator: the run's noise stream is not touched, and nothing is recorded."""
        import copy

        twin = DpSgd(copy.deepcopy(self.module), sigma=self.sigma, clip=self.clip, sampling_rate=self.sampling_rate, steps=1,
                     count_sigma=self.count_sigma, lr=0.0, momentum=0.0, accountant=None, noise=torch.Generator().manual_seed(0))
        model, opt, criterion = twin._engine(lot)
        xb = torch.randn(lot, *shape, generator=torch.Generator().manual_seed(0))  # its own stream: the run's are untouched
        yb = torch.zeros(lot, dtype=torch.long)  # labels do not change the time

        def step():
            opt.zero_grad()
            criterion(model(xb), yb).backward()
            opt.step()

        with _quiet_opacus():
            step()  # warm-up
            return median_seconds(step, at_least=0.5, at_most=5)

    def _engine(self, expected_batch_size: int):
        """(model, optimizer, loss): Opacus' ghost clipping (per-example gradient norms without materialising per-example
        gradients: the same clipped sum, 3–4× faster on a linear head) where every layer supports it, its per-sample
        hooks otherwise. Both clip each example's whole gradient to C and add N(0, σ²C²) to the sum."""
        from opacus import GradSampleModule
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        kw = dict(noise_multiplier=self.sigma, max_grad_norm=self.clip, expected_batch_size=expected_batch_size, generator=self.generator)
        try:
            model = GradSampleModuleFastGradientClipping(self.module, max_grad_norm=self.clip, use_ghost_clipping=True)
        except NotImplementedError:
            model = GradSampleModule(self.module)
            self.engine = "opacus per-sample gradient hooks (GradSampleModule, DPOptimizer)"
            return model, DPOptimizer(self._sgd(model), **kw), F.cross_entropy
        opt = DPOptimizerFastGradientClipping(self._sgd(model), **kw)
        self.engine = "opacus ghost clipping (GradSampleModuleFastGradientClipping, DPOptimizerFastGradientClipping)"
        return model, opt, DPLossFastGradientClipping(model, opt, torch.nn.CrossEntropyLoss())

    def _sgd(self, model):
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum)

    def _record(self, opt) -> None:
        self.accountant.record("subsampled_gaussian", sigma=opt.noise_multiplier, clip=opt.max_grad_norm, sampling_rate=self.sampling_rate)


def train_on_private(records, student_name: str, spec, *, minibatch: int, make_sgd: Callable[[torch.nn.Module], "DpSgd"],
                     named: Callable[..., None], on_step: Optional[Callable[[int], None]] = None,
                     on_estimate: Optional[Callable[[float], None]] = None):
    """Open the private records, compute a fixed-feature student's features of each record (one record at a time in
    effect), run DP-SGD on them; returns (student, what was trained, the Opacus engine used). ``make_sgd`` builds the
    ``DpSgd`` for the module to train; ``named`` names progress phases (no record counts). ``on_estimate`` receives the
    seconds the features and the steps should take, timed on synthetic inputs sized by the noisy count ñ (drawn first,
    so the estimate is post-processing of it: timing the real records would time n)."""
    named("reading the private data")
    private = records.open_records()
    student, trainable, fixed, part = _trainable(student_name, spec)
    mech = make_sgd(trainable)
    noisy_n = mech.noisy_count(len(private.x))
    if on_estimate:
        probe = torch.randn(minibatch, *spec.shape, generator=torch.Generator().manual_seed(0))  # not the global stream
        features = 0.0 if fixed is None else max(0.0, noisy_n) / minibatch * median_seconds(lambda: _features(fixed, probe), at_most=5)
        on_estimate(features + mech.steps * mech.step_seconds(mech.expected_lot(noisy_n), _feature_shape(fixed, spec)))
    named("fixed features of the private records")
    inputs = private.x if fixed is None else _features(fixed, private.x, minibatch)
    named("DP-SGD steps", mech.steps, "steps")
    with phase("DP-SGD", items=mech.steps):
        trained = mech.fit(inputs, private.y, on_step=on_step, noisy_n=noisy_n)
    _put_back(student, trained, part)
    return student, part, mech.engine


def _trainable(name: str, spec):
    """(student, module DP-SGD trains, its fixed feature extractor or None, description). A student with
    ``fixed_features`` (no weights) has only its head trained, on the features of each record."""
    from dpconvert.students import create_student

    student = create_student(name, spec)
    fixed = getattr(student, "fixed_features", None)
    if fixed is not None:
        return student, student.head, fixed.eval(), "head only (the fixed scattering transform has no weights)"
    from opacus.validators import ModuleValidator

    student = ModuleValidator.fix(student)  # BatchNorm → GroupNorm: per-example gradients need per-example normalisation
    for m in student.modules():
        if hasattr(m, "inplace"):
            m.inplace = False
    return student, student, None, "the whole student (BatchNorm replaced by GroupNorm)"


@torch.no_grad()
def _features(fixed, x: torch.Tensor, minibatch: Optional[int] = None) -> torch.Tensor:
    """The fixed features of each record, a minibatch at a time (eval mode, no batch statistics: one record at a time
    in effect)."""
    if minibatch is None:
        return fixed(x)
    with phase("fixed features", items=len(x)):
        return torch.cat([fixed(c) for c in x.split(minibatch)])


def _feature_shape(fixed, spec) -> tuple:
    return tuple(spec.shape) if fixed is None else tuple(_features(fixed, torch.zeros(1, *spec.shape)).shape[1:])


def _put_back(student, trained, part: str) -> None:
    if part.startswith("head"):
        student.head = trained


def poisson_lots(n: int, sampling_rate: float, steps: int, generator: torch.Generator):
    """``steps`` index tensors: Opacus' Poisson sampler (each of the n records joins each lot independently with
    probability q, from ``generator``). Indexing the tensors directly instead of collating one item at a time through a
    DataLoader is the same lots, several times faster for lots of thousands."""
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler

    for indices in UniformWithReplacementSampler(num_samples=n, sample_rate=sampling_rate, generator=generator, steps=steps):
        yield torch.as_tensor(indices, dtype=torch.long)


@contextlib.contextmanager
def _quiet_opacus():
    """Opacus logs a warning for each empty lot (expected under Poisson sampling) and torch warns that its backward
    hooks fire on a head whose inputs (fixed features) need no gradient (harmless); neither helps a user."""
    opacus_log = logging.getLogger("opacus")
    level = opacus_log.level
    opacus_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            yield
    finally:
        opacus_log.setLevel(level)
