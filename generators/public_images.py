"""A query source from unlabelled public images (DPDFD's labelled "public warm start" option).

Not data-free: the user supplies images believed public (``--public-data``),
and the card says so. Each query is a public image under a random, label-preserving
augmentation (shift, horizontal flip) and, with probability
``mix_prob``, mixed with a second public image (mixup, weight ≥ ``mix_min``) for
diversity between the images. The teacher's privacy is unaffected by where the
queries come from (the query-level ε depends on σ and the releases only); the
public images themselves are not protected by anything.

Same interface as the random-field prior: ``forward(z)`` with all randomness in
``z`` (so the run stays deterministic under ``--seed``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PublicImageSource(nn.Module):
    def __init__(self, images: torch.Tensor, *, max_shift: int = 2, flip: bool = True, mix_prob: float = 0.3,
                 mix_min: float = 0.6) -> None:
        super().__init__()
        if len(images) == 0:
            raise ValueError("no public images")
        self.register_buffer("images", images.float())  # already normalised to the teacher's input spec
        self.max_shift, self.flip, self.mix_prob, self.mix_min = max_shift, flip, mix_prob, mix_min
        self.num_classes = None
        self.nz = 7  # image, partner, shift y, shift x, flip, mix?, mix weight — all uniform via Φ(z)

    @property
    def num_sources(self) -> int:
        return len(self.images)

    def _draws(self, z: torch.Tensor):
        u = torch.special.ndtr(z[:, :7])
        n_img = len(self.images)
        first = (u[:, 0] * n_img).long().clamp(max=n_img - 1)
        second = (u[:, 1] * n_img).long().clamp(max=n_img - 1)
        return u, first, second, u[:, 5] < self.mix_prob

    def sources(self, z: torch.Tensor) -> torch.Tensor:
        """(n, 2) indices of the public images each query is made of (−1: none): the image, and its mixup partner."""
        _, first, second, mixed = self._draws(z)
        second = torch.where(mixed & (second != first), second, torch.full_like(second, -1))
        return torch.stack([first, second], 1)

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        u, first, second, mixed = self._draws(z)
        x = self.images[first]
        mix = mixed.float()
        lam = self.mix_min + (1 - self.mix_min) * u[:, 6]
        w = (1 - mix * (1 - lam)).view(-1, 1, 1, 1)  # 1 when not mixing
        x = w * x + (1 - w) * self.images[second]
        if self.flip:
            x = torch.where((u[:, 4] < 0.5).view(-1, 1, 1, 1), x.flip(3), x)
        s = self.max_shift
        if s:
            # integer shifts with zero-free edges: pad by reflection, then crop at a per-sample offset
            dy = (u[:, 2] * (2 * s + 1)).long().clamp(max=2 * s)
            dx = (u[:, 3] * (2 * s + 1)).long().clamp(max=2 * s)
            padded = F.pad(x, (s, s, s, s), mode="replicate")
            h, wd = x.shape[2], x.shape[3]
            rows = (torch.arange(h, device=x.device).view(1, h) + dy.view(-1, 1))  # (n, h)
            cols = (torch.arange(wd, device=x.device).view(1, wd) + dx.view(-1, 1))  # (n, w)
            idx_n = torch.arange(len(x), device=x.device).view(-1, 1, 1)
            x = padded.permute(0, 2, 3, 1)[idx_n, rows.unsqueeze(2), cols.unsqueeze(1)].permute(0, 3, 1, 2)
        return x
