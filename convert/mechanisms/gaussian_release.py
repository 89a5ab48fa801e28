"""Noise-adding mechanisms. Each is the *only* place its noise is drawn, and it
reports exactly the parameters it used to the accountant in the same call, so
that the ε on the card cannot drift from the noise that ran."""

from __future__ import annotations

import torch

from dpconvert.accounting import DpdfdAccountant
from dpconvert.distributed import LOCAL, World


class NormalisedGaussianRelease:
    """DPDFD's A_{C,σ} ("Differentially Private Data-Free Distillation", Algorithm 1 lines 6–9: per-row normalisation, then noise).

    Each row g_i of the B×K matrix of per-sample output gradients is scaled to
    norm C (ḡ_i = C·g_i / (‖g_i‖₂ + e)), then independent N(0, σ²C²) is added to
    every entry. One call = one noisy release = one accountant event.

    Under torchrun (``world``) each rank passes its own ``shard`` of the B rows; it noises those rows only and the
    noisy rows of all ranks are gathered, so every row is noised once and the accountant sees one release of B rows.
    ``replicated_stream``: every rank holds the same (seeded) stream, so each draws the whole B×K noise and keeps its
    rows — the noise of one process, row for row. With secret streams each rank draws its own rows' noise only.
    """

    mechanism = "normalised_gaussian_release"

    def __init__(self, *, sigma: float, clip: float, accountant: DpdfdAccountant, generator: torch.Generator, stability: float = 1e-6,
                 world: World = LOCAL, replicated_stream: bool = False) -> None:
        if sigma < 0 or clip <= 0:
            raise ValueError("sigma must be >= 0 and clip > 0")
        self.sigma, self.clip, self.stability = float(sigma), float(clip), float(stability)
        self.accountant = accountant
        self.generator = generator  # secret by default (convert/noise.py)
        self.world, self.replicated_stream = world, replicated_stream
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

    def mean_of_normalised(self, per_teacher: list[torch.Tensor]) -> torch.Tensor:
        """Several teachers' rows for the same inputs → one row each: the mean of the n teachers' normalised rows
        ("Differentially Private Data-Free Distillation", the multi-teacher extension). Not normalised again: each
        teacher's share is at most C/n, which is what bounds one teacher's (one partition's) effect by 2C/n per row."""
        return torch.stack([self.normalise(g.detach().float().cpu()) for g in per_teacher]).mean(0)

    def clip_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows scaled down to norm ≤ C where rounding left one above it (means of normalised rows already are)."""
        rows = torch.where(torch.isfinite(rows).all(dim=1, keepdim=True), rows, torch.zeros_like(rows))
        return rows * (self.clip / rows.norm(dim=1, keepdim=True).clamp(min=self.clip))

    def release(self, grads: torch.Tensor, total: int | None = None, teachers: int = 1) -> torch.Tensor:
        """The noisy release of all ``total`` rows; ``grads`` are this rank's rows (``world.shard(total)``; all of them
        in one process). ``teachers`` > 1: the rows are ``mean_of_normalised`` over that many teachers (clipped to C,
        not normalised again), and the count goes on the accountant's event with σ, C and B."""
        if grads.ndim != 2:
            raise ValueError("expected a (batch, classes) matrix of output gradients")
        total = len(grads) if total is None else int(total)
        g = self.normalise(grads.detach().float().cpu()) if teachers == 1 else self.clip_rows(grads.detach().float().cpu())
        noise = self._noise(total, g.shape[1]) * (self.sigma * self.clip)
        several = {"teachers": int(teachers)} if teachers > 1 else {}  # one teacher's events are as they always were
        self.accountant.record(self.mechanism, sigma=self.sigma, clip=self.clip, batch_size=total, **several)
        return self.world.gather_rows(g + noise, total).to(grads.device)

    def _noise(self, total: int, cols: int) -> torch.Tensor:
        if not self.world.distributed or self.replicated_stream:
            return torch.randn((total, cols), generator=self.generator)[self.world.shard(total)]
        lo, hi = self.world.bounds(total)
        return torch.randn((hi - lo, cols), generator=self.generator)
