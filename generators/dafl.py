"""DAFL-style generator (Chen et al. 2019, "Data-Free Learning of Student Networks"), sized as docs/methods.md says.

Linear → BN → up×2 → conv3 → BN → LReLU → up×2 → conv3 → BN → LReLU → conv3 → tanh,
then mapped to the classifier's normalised input space. With ``conditional``
the class label scales the latent code through an embedding, so a generator
can be asked for a class (the label is public: chosen by us, not the data).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .registry import GENERATORS


class DaflGenerator(nn.Module):
    def __init__(self, spec, nz: int = 100, width: int = 64, conditional: bool = True) -> None:
        super().__init__()
        self.spec, self.nz = spec, nz
        self.num_classes = spec.num_classes if conditional else None
        self.init_h, self.init_w = max(2, math.ceil(spec.height / 4)), max(2, math.ceil(spec.width / 4))
        self.embed = nn.Embedding(spec.num_classes, nz) if conditional else None
        self.fc = nn.Linear(nz, 2 * width * self.init_h * self.init_w)
        self.net = nn.Sequential(
            nn.BatchNorm2d(2 * width),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=2),
            nn.Conv2d(2 * width, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(width, spec.channels, 3, padding=1),
            nn.Tanh(),
        )
        self.width = width
        self.register_buffer("mean", torch.tensor(spec.mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(spec.std).view(1, -1, 1, 1))

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.embed is not None:
            if labels is None:
                raise ValueError("a conditional generator needs labels")
            z = z * self.embed(labels)
        h = self.fc(z).view(z.shape[0], 2 * self.width, self.init_h, self.init_w)
        img = self.net(h)
        if img.shape[-2:] != (self.spec.height, self.spec.width):
            img = F.interpolate(img, size=(self.spec.height, self.spec.width), mode="bilinear", align_corners=False)
        pixels = (img + 1) / 2
        return (pixels - self.mean) / self.std


@GENERATORS.register("dafl")
def dafl(spec, *, nz: int = 100, conditional: bool = True) -> nn.Module:
    return DaflGenerator(spec, nz=nz, width=64, conditional=conditional)


@GENERATORS.register("dafl_small")
def dafl_small(spec, *, nz: int = 100, conditional: bool = True) -> nn.Module:
    return DaflGenerator(spec, nz=nz, width=32, conditional=conditional)
