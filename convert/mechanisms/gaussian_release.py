"""Noise-adding mechanisms. Each is the *only* place its noise is drawn, and it
reports exactly the parameters it used to the accountant in the same call, so
that the ε on the card cannot drift from the noise that ran."""

from __future__ import annotations

import torch

from dpconvert.accounting import DpdfdAccountant


class NormalisedGaussianRelease:
    """DPDFD's A_{C,σ} ("Differentially Private Data-Free Distillation", Algorithm 1 lines 6–9: per-row normalisation, then noise).

    Each row g_i of the B×K matrix of per-sample output gradients is scaled to
    norm C (ḡ_i = C·g_i / (‖g_i‖₂ + e)), then independent N(0, σ²C²) is added to
    every entry. One call = one noisy release = one accountant event.
    """

    mechanism = "normalised_gaussian_release"

    def __init__(self, *, sigma: float, clip: float, accountant: DpdfdAccountant, generator: torch.Generator, stability: float = 1e-6) -> None:
        if sigma < 0 or clip <= 0:
            raise ValueError("sigma must be >= 0 and clip > 0")
        self.sigma, self.clip, self.stability = float(sigma), float(clip), float(stability)
        self.accountant = accountant
        self.generator = generator  # secret by default (convert/noise.py)
        self.zeroed_rows = 0  # non-finite rows replaced by zero rows (console only: a count of answers is data-dependent)

    def normalise(self, grads: torch.Tensor) -> torch.Tensor:
        """Rows scaled to norm ≤ C. A non-finite row (an inf/NaN teacher answer) becomes a zero row: the bound holds for
        any input, nothing non-finite is released, and the run does not stop on a condition that depends on the answers."""
        finite = torch.isfinite(grads).all(dim=1, keepdim=True)
        self.zeroed_rows += int((~finite).sum())
        grads = torch.where(finite, grads, torch.zeros_like(grads))
        norms = grads.norm(dim=1, keepdim=True)
        g = self.clip * grads / (norms + self.stability)
        return torch.where(torch.isfinite(g).all(dim=1, keepdim=True), g, torch.zeros_like(g))  # a norm that overflowed

    def release(self, grads: torch.Tensor) -> torch.Tensor:
        if grads.ndim != 2:
            raise ValueError("expected a (batch, classes) matrix of output gradients")
        g = self.normalise(grads.detach().float().cpu())
        noise = torch.randn(g.shape, generator=self.generator) * (self.sigma * self.clip)
        self.accountant.record(self.mechanism, sigma=self.sigma, clip=self.clip, batch_size=int(g.shape[0]))
        return (g + noise).to(grads.device)
