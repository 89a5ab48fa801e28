"""A query source from unlabelled public images (DPDFD's labelled "public warm start" option).

Not data-free: the user supplies images believed public (``--public-data``),
and the card says so. Each query is a public image under a random, label-preserving
augmentation (a shift of up to ``max_shift`` pixels, continuous by default, and a
horizontal flip) and, with probability ``mix_prob``, mixed with a second public
image (mixup, weight ≥ ``mix_min``) for diversity between the images. Continuous
(sub-pixel, bilinear) shifts make every draw a new input, so a release of
millions of distinct rows can come from a few thousand images; integer shifts
(``subpixel=False``) give at most (2·shift+1)²·2 inputs per image. The teacher's privacy is unaffected by where the
queries come from (the query-level ε depends on σ and the releases only); the
public images themselves are not protected by anything.

Same interface as the random-field prior: ``forward(z)`` with all randomness in
``z`` (so the run stays deterministic under ``--seed``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .sampling_grid import translation_grid


class PublicImageSource(nn.Module):
    """Views of public images. The *bases* are the images themselves and, with ``blends`` > 0, that many fixed blends
    λ·a + (1 − λ)·b of random pairs (λ ≥ ``blend_min``; drawn once from ``seed``): new inputs between the images, each
    of which can be queried many times under different shifts and flips (so its answers can be averaged)."""

    NZ = 7  # a view's z: base, partner, shift y, shift x, flip, mix?, mix weight — all uniform via Φ(z)

    def __init__(self, images: torch.Tensor, *, max_shift: int = 2, flip: bool = True, mix_prob: float = 0.3,
                 mix_min: float = 0.6, subpixel: bool = True, blends: int = 0, blend_min: float = 0.5, seed: int = 0,
                 public: bool = True, public_count: int | None = None) -> None:
        super().__init__()
        if len(images) == 0:
            raise ValueError("no public images")
        if blends and mix_prob:
            raise ValueError("fixed blends and random mixing are alternatives: set mix_prob=0 with blends")
        self.register_buffer("images", images.float())  # already normalised to the teacher's input spec
        self.max_shift, self.flip, self.mix_prob, self.mix_min, self.subpixel = max_shift, flip, mix_prob, mix_min, subpixel
        self.public = public  # False: images drawn from a data-free prior (no per-image ε: they are nobody's data)
        # a mixture: the first public_count images are public, the rest drawn from a data-free prior (not counted)
        self.public_count = len(images) if public_count is None else public_count
        g = torch.Generator().manual_seed(seed)
        pairs = torch.randint(0, len(images), (blends, 2), generator=g)
        self.register_buffer("pairs", pairs)
        self.register_buffer("weights", blend_min + (1 - blend_min) * torch.rand(blends, generator=g))
        self.num_classes = None
        self.nz = self.NZ

    @property
    def num_sources(self) -> int | None:
        """Public images (what the per-image ε counts rows of); None for images from a data-free prior."""
        return self.public_count if self.public else None

    @property
    def num_bases(self) -> int:
        return len(self.images) + len(self.pairs)

    def base_images(self, index: torch.Tensor) -> torch.Tensor:
        n = len(self.images)
        x = self.images[index.clamp(max=n - 1)]
        blend = index >= n
        if blend.any():
            k = index[blend] - n
            w = self.weights[k].view(-1, 1, 1, 1)
            x[blend] = w * self.images[self.pairs[k, 0]] + (1 - w) * self.images[self.pairs[k, 1]]
        return x

    def _draws(self, z: torch.Tensor):
        u = torch.special.ndtr(z[:, :7])
        n_img = len(self.images)
        base = (u[:, 0] * self.num_bases).long().clamp(max=self.num_bases - 1)
        second = (u[:, 1] * n_img).long().clamp(max=n_img - 1)
        return u, base, second, u[:, 5] < self.mix_prob

    def base_index(self, z: torch.Tensor) -> torch.Tensor:
        """The base each query is a view of (−1 for a random mixture, which is a view of no single base)."""
        _, base, _, mixed = self._draws(z)
        return torch.where(mixed, torch.full_like(base, -1), base)

    def sources(self, z: torch.Tensor) -> torch.Tensor:
        """(n, 2) indices of the public images each query is made of (−1: none)."""
        _, base, second, mixed = self._draws(z)
        n = len(self.images)
        first = torch.where(base < n, base, self.pairs[(base - n).clamp(min=0), 0] if len(self.pairs) else base)
        other = self.pairs[(base - n).clamp(min=0), 1] if len(self.pairs) else torch.full_like(base, -1)
        second = torch.where(base >= n, other, torch.where(mixed, second, torch.full_like(second, -1)))
        second = torch.where(second == first, torch.full_like(second, -1), second)
        pair = torch.stack([first, second], 1)
        return torch.where(pair >= self.public_count, torch.full_like(pair, -1), pair)  # prior images are nobody's

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        u, base, second, mixed = self._draws(z)
        x = self.base_images(base)
        mix = mixed.float()
        lam = self.mix_min + (1 - self.mix_min) * u[:, 6]
        w = (1 - mix * (1 - lam)).view(-1, 1, 1, 1)  # 1 when not mixing
        x = w * x + (1 - w) * self.images[second]
        if self.flip:
            x = torch.where((u[:, 4] < 0.5).view(-1, 1, 1, 1), x.flip(3), x)
        return self.shift(x, u[:, 2], u[:, 3])

    def augment(self, index: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Bases ``index`` under the shift and flip in ``z`` (no mixing): fresh views of chosen bases for training."""
        u = torch.special.ndtr(z[:, :7])
        x = self.base_images(index)
        if self.flip:
            x = torch.where((u[:, 4] < 0.5).view(-1, 1, 1, 1), x.flip(3), x)
        return self.shift(x, u[:, 2], u[:, 3])

    def shift(self, x: torch.Tensor, uy: torch.Tensor, ux: torch.Tensor) -> torch.Tensor:
        """x shifted by (uy, ux)·2s − s pixels (uniforms in [0, 1]); edges replicated."""
        s = self.max_shift
        if not s:
            return x
        if self.subpixel:  # bilinear resampling at a continuous offset; "border" padding replicates the edges
            h, wd = x.shape[2], x.shape[3]
            grid = translation_grid(len(x), h, wd, (ux.to(x.device) * 2 - 1) * s * 2 / wd, (uy.to(x.device) * 2 - 1) * s * 2 / h)
            return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        # integer shifts: pad by replication, then crop at a per-sample offset
        dy = (uy * (2 * s + 1)).long().clamp(max=2 * s)
        dx = (ux * (2 * s + 1)).long().clamp(max=2 * s)
        padded = F.pad(x, (s, s, s, s), mode="replicate")
        h, wd = x.shape[2], x.shape[3]
        rows = (torch.arange(h, device=x.device).view(1, h) + dy.view(-1, 1))  # (n, h)
        cols = (torch.arange(wd, device=x.device).view(1, wd) + dx.view(-1, 1))  # (n, w)
        idx_n = torch.arange(len(x), device=x.device).view(-1, 1, 1)
        return padded.permute(0, 2, 3, 1)[idx_n, rows.unsqueeze(2), cols.unsqueeze(1)].permute(0, 3, 1, 2)
