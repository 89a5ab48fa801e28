"""What the learned generators share: class conditioning of the latent code and the map to the classifier's input.

A subclass builds ``fc`` (latent → a 2·width × ⌈H/4⌉ × ⌈W/4⌉ grid) and ``net`` (grid → image in [−1, 1], ×4 upsampling);
the class label, when conditional, scales the latent code through an embedding (the label is public: chosen by us).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ConditionalImageGenerator(nn.Module):
    def __init__(self, spec, nz: int, width: int, conditional: bool) -> None:
        super().__init__()
        self.spec, self.nz, self.width = spec, nz, width
        self.num_classes = spec.num_classes if conditional else None
        self.init_h, self.init_w = max(2, math.ceil(spec.height / 4)), max(2, math.ceil(spec.width / 4))
        self.embed = nn.Embedding(spec.num_classes, nz) if conditional else None
        self.register_buffer("mean", torch.tensor(spec.mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(spec.std).view(1, -1, 1, 1))

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.embed is not None:
            if labels is None:
                raise ValueError("a conditional generator needs labels")
            z = z * self.embed(labels)
        img = self.net(self.fc(z).view(z.shape[0], 2 * self.width, self.init_h, self.init_w))
        if img.shape[-2:] != (self.spec.height, self.spec.width):
            img = F.interpolate(img, size=(self.spec.height, self.spec.width), mode="bilinear", align_corners=False)
        return ((img + 1) / 2 - self.mean) / self.std
