"""A GAN critic released once: the noisy class-conditional kernel mean embedding of the private records.

The critic of an MMD GAN ("MMD GAN: Towards Deeper Understanding of Moment Matching Network", Li et al. 2017) is
the witness of a kernel two-sample test, f_y(x) = ⟨μ_real(y) − μ_fake(y), φ(x)⟩; its only private part is the mean
embedding μ_real of the private records of class y. "DP-MERF: Differentially Private Mean Embeddings with Random
Features for Practical Privacy-Preserving Data Generation" (Harder et al., 2021) releases that embedding once
through the Gaussian mechanism, with random Fourier features φ for a Gaussian kernel, and trains the generator
against it for as long as it likes: everything after the release is post-processing. Against the DP-SGD critic
(``dp_gan.py``), whose every step spends budget on a few hundred records, the whole budget buys one release of a
sum over all n records, so the noise relative to the signal shrinks like 1/n (measured: RESULTS table 4).

Sensitivity, add/remove one record (x, y). With W ~ N(0, I/ℓ²) (d × D, fixed by the seed, data-independent) and x
the record's pixels in [0, 1],

    φ(x) = (cos(Wᵀx), sin(Wᵀx)) / √D          ‖φ(x)‖₂ = 1 exactly (cos² + sin² = 1 per frequency)
    v(x) = (φ(x), 1) / √2                      ‖v(x)‖₂ = 1
    S[c] = Σ_{i: y_i = c} v(x_i)               the released K × (2D + 1) matrix, plus N(0, σ²) per entry

One record changes one row of S by v(x), so the ℓ2 sensitivity is 1 and S + N(0, σ²I) is the Gaussian mechanism
with noise multiplier σ. v is computed in float64 and divided by max(1, ‖v‖) so that rounding cannot push a row
past 1; a non-finite pixel makes its record's v zero (per record, data-independent). The last column is the
noisy class count, so the generator's target μ̂(c) = S̃[c, :2D] / S̃[c, 2D] needs no other access to n.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from dpconvert.mechanisms.noise import as_generator


class RandomFourierFeatures(nn.Module):
    """φ(x) for a Gaussian kernel of length scale ℓ (in [0, 1] pixel units) on the flattened image: unit norm for every
    x. Inputs arrive normalised by the spec's mean/std and are mapped back to pixels, so ℓ means the same for every
    normalisation."""

    def __init__(self, spec, features: int, length_scale: float, seed: int) -> None:
        super().__init__()
        w = torch.randn(math.prod(spec.shape), features, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) / length_scale
        self.register_buffer("w", w)
        self.register_buffer("std", torch.tensor(spec.std, dtype=torch.float64).reshape(1, -1, 1, 1))
        self.register_buffer("mean", torch.tensor(spec.mean, dtype=torch.float64).reshape(1, -1, 1, 1))
        self.shape = spec.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """In x's precision: float64 for the release (``record_vectors``), float32 for the generator's samples."""
        pixels = x.reshape(-1, *self.shape) * self.std.to(x.dtype) + self.mean.to(x.dtype)
        p = pixels.flatten(1) @ self.w.to(x.dtype)
        return torch.cat([torch.cos(p), torch.sin(p)], 1) / math.sqrt(self.w.shape[1])


def record_vectors(phi: RandomFourierFeatures, x: torch.Tensor) -> torch.Tensor:
    """v(x) per record: (φ(x), 1)/√2, ℓ2 norm ≤ 1 whatever x holds (float64)."""
    x = x.reshape(len(x), -1).to(torch.float64)
    finite = torch.isfinite(x).all(1)
    v = torch.cat([phi(torch.where(finite[:, None], x, torch.zeros_like(x))), torch.ones(len(x), 1, dtype=torch.float64)], 1) / math.sqrt(2)
    v = v / v.norm(dim=1, keepdim=True).clamp(min=1.0)
    return v * finite[:, None]


def noisy_embedding(phi: RandomFourierFeatures, x: torch.Tensor, y: torch.Tensor, num_classes: int, *, sigma: float,
                    noise: torch.Generator, chunk: int = 4096) -> torch.Tensor:
    """S̃ = Σ_i e_{y_i} ⊗ v(x_i) + N(0, σ²): the one release (K × (2D + 1), float64)."""
    s = torch.zeros(num_classes, 2 * phi.w.shape[1] + 1, dtype=torch.float64)
    for i in range(0, len(x), chunk):
        s.index_add_(0, y[i:i + chunk].long(), record_vectors(phi, x[i:i + chunk]))
    return s + sigma * torch.randn(s.shape, generator=noise, dtype=torch.float64)


def embedding_targets(released: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(μ̂ per class, which classes to fit): post-processing of the release. A class whose noisy count is under one
    record carries no usable signal and is left out of the loss."""
    count = released[:, -1] * math.sqrt(2)
    mean = released[:, :-1] * math.sqrt(2) / count.clamp(min=1.0)[:, None]
    return mean.float(), count >= 1.0


class EmbeddingGanTraining:
    """Releases the noisy embedding (one event for ``accountant``), then fits ``generator`` to it; the records are
    read once, by :func:`noisy_embedding`, and never again."""

    def __init__(self, generator: nn.Module, spec, *, sigma: float, features: int, length_scale: float, steps: int,
                 fake_batch: int, lr: float, accountant, noise, train_rng: torch.Generator, feature_seed: int) -> None:
        self.generator, self.spec, self.sigma, self.steps, self.fake_batch, self.lr = generator, spec, sigma, steps, fake_batch, lr
        self.accountant, self.noise, self.train_rng = accountant, as_generator(noise), train_rng
        self.phi = RandomFourierFeatures(spec, features, length_scale, feature_seed)

    def fit(self, x: torch.Tensor, y: torch.Tensor, on_step: Optional[Callable[[int, float, float], None]] = None) -> nn.Module:
        released = noisy_embedding(self.phi, x, y, self.spec.num_classes, sigma=self.sigma, noise=self.noise)
        self.accountant.record("subsampled_gaussian", sigma=self.sigma, clip=1.0, sampling_rate=1.0)
        return self.fit_generator(released, on_step)

    def fit_generator(self, released: torch.Tensor, on_step: Optional[Callable[[int, float, float], None]] = None) -> nn.Module:
        """Post-processing: the generator sees ``released`` and its own samples, nothing else."""
        target, fitted = embedding_targets(released)
        k = self.spec.num_classes
        per = max(1, self.fake_batch // k)
        labels = torch.arange(k).repeat_interleave(per)
        opt = torch.optim.Adam(self.generator.parameters(), lr=self.lr)
        self.generator.train()
        for step in range(1, self.steps + 1):
            z = torch.randn(len(labels), self.generator.nz, generator=self.train_rng)
            fake = self.phi(self.generator(z, labels)).reshape(k, per, -1).mean(1)
            loss = (fake - target).pow(2).sum(1)[fitted].sum()  # the MMD² between fake and noisy real, per class
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if on_step:
                on_step(step, float(loss.detach()), float(loss.detach()))
        return self.generator.eval()
