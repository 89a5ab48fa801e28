"""A GAN whose critic is trained with DP-SGD: the only part of the GAN that touches private records.

"Generating Artificial Data for Private Deep Learning" (Triastcyn & Faltings) makes the critic private so that
the generator, which learns only through the critic, is private by post-processing. The paper clips and noises
one critic layer's activations; we train the whole critic with DP-SGD through Opacus instead, because its
accounting (Poisson-subsampled Gaussian, PLD/RDP) is standard, replayable from the card's events and tested
against Opacus' own accountants — the paper's layer-level analysis has no such accountant.

One critic step: a Poisson lot of real records (rate q) and a fixed number of generated ones are scored in one
forward pass; every example's gradient is clipped to C and N(0, σ²C²) is added to the sum (``DPOptimizer``). Adding
or removing one real record changes the clipped sum by at most C; the generated examples depend on the generator
only, which is post-processing of earlier noisy steps. The fake count is an option, never a function of the data,
and Adam (scale-invariant) makes the expected-lot normaliser irrelevant, so n enters nothing.

One generator step: the loss of generated examples under the critic, with the critic's parameters frozen and its
per-sample hooks off: the generator sees the critic's (noisy) weights, never a real record or its gradient.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from dpconvert.mechanisms.noise import as_generator


class DpCritic(nn.Module):
    """Two strided convolutions and a projection-conditional output (Miyato & Koyama 2018): no batch statistics,
    every layer supported by Opacus' per-sample gradients."""

    def __init__(self, spec, width: int = 32) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(spec.channels, width, 4, 2, 1), nn.LeakyReLU(0.2),
                                  nn.Conv2d(width, 2 * width, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten())
        with torch.no_grad():
            d = self.conv(torch.zeros(1, *spec.shape)).shape[1]
        self.out = nn.Linear(d, 1)
        self.embed = nn.Embedding(spec.num_classes, d)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x), y)

    def head(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The projection-conditional score of the features ``h`` for classes ``y``."""
        return self.out(h).squeeze(1) + (self.embed(y) * h).sum(1) / math.sqrt(h.shape[1])


class DpGanTraining:
    """Trains ``generator`` against a DP critic on (x, y); reports every critic step to ``accountant``."""

    def __init__(self, generator: nn.Module, spec, *, sigma: float, clip: float, sampling_rate: float, steps: int, fake_batch: int,
                 lr: float, accountant, noise, train_rng: torch.Generator) -> None:
        self.generator, self.critic = generator, DpCritic(spec)
        self.spec, self.sigma, self.clip, self.sampling_rate, self.steps = spec, sigma, clip, sampling_rate, steps
        self.fake_batch, self.lr, self.accountant, self.noise, self.train_rng = fake_batch, lr, accountant, as_generator(noise), train_rng

    def fake(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.randn(n, self.generator.nz, generator=self.train_rng)
        y = torch.randint(0, self.spec.num_classes, (n,), generator=self.train_rng)
        return self.generator(z, y), y

    def fit(self, x: torch.Tensor, y: torch.Tensor, on_step: Optional[Callable[[int, float, float], None]] = None) -> nn.Module:
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        from .dp_sgd import _quiet_opacus, poisson_lots

        # ghost clipping: each example's whole-critic gradient norm without materialising per-example gradients
        critic = GradSampleModuleFastGradientClipping(self.critic, max_grad_norm=self.clip, use_ghost_clipping=True)
        opt_d = DPOptimizerFastGradientClipping(torch.optim.Adam(critic.parameters(), lr=self.lr, betas=(0.5, 0.999)),
                                                noise_multiplier=self.sigma, max_grad_norm=self.clip,
                                                expected_batch_size=2 * self.fake_batch, generator=self.noise)
        opt_d.attach_step_hook(self._record)
        self.critic_loss = DPLossFastGradientClipping(critic, opt_d, torch.nn.BCEWithLogitsLoss())
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        y = y.long()
        with _quiet_opacus():
            for step, idx in enumerate(poisson_lots(len(x), self.sampling_rate, self.steps, self.noise), 1):
                loss_d = self._critic_step(critic, opt_d, x[idx], y[idx])
                loss_g = self._generator_step(critic, opt_g)
                if on_step:
                    on_step(step, loss_d, loss_g)
        return self.generator.eval()

    def _critic_step(self, critic, opt, xr: torch.Tensor, yr: torch.Tensor) -> float:
        self.generator.eval()
        with torch.no_grad():
            xf, yf = self.fake(self.fake_batch)
        xb, yb = torch.cat([xr.reshape(-1, *self.spec.shape), xf]), torch.cat([yr.long(), yf])
        target = torch.cat([torch.ones(len(xr)), torch.zeros(len(xf))])
        opt.zero_grad(set_to_none=True)
        loss = self.critic_loss(critic(xb, yb), target)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def _generator_step(self, critic, opt) -> float:
        """Through the critic's current weights only: frozen, hooks off, no real record in the graph."""
        self.generator.train()
        critic.disable_hooks()
        self.critic.requires_grad_(False)
        try:
            xf, yf = self.fake(self.fake_batch)
            loss = F.binary_cross_entropy_with_logits(self.critic(xf, yf), torch.ones(len(xf)))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        finally:
            self.critic.requires_grad_(True)
            critic.enable_hooks()
        return float(loss.detach())

    def _record(self, opt) -> None:
        self.accountant.record("subsampled_gaussian", sigma=opt.noise_multiplier, clip=opt.max_grad_norm, sampling_rate=self.sampling_rate)


def fit_on_private(training, records, report=None):
    """Open the private records and train ``training`` (either critic's) on them: the critic's noisy release is the
    only path from a record to the generator."""
    private = records.open_records()
    return training.fit(private.x, private.y, report)
