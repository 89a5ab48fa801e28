"""A small conditional DCGAN generator (Radford et al. 2016): transposed convolutions from a 4×-downsampled grid.

Cheap enough to train against a DP critic on a CPU (the DP-critic GAN query source, ``mechanisms/dp_gan.py``):
about 7 M multiply-adds per 28×28 sample, a quarter of ``dafl_small``. The class label scales the latent code
(as in ``dafl.py``); the output is mapped to the classifier's normalised input space.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .registry import GENERATORS


class DcganGenerator(nn.Module):
    def __init__(self, spec, nz: int = 64, width: int = 32, conditional: bool = True) -> None:
        super().__init__()
        self.spec, self.nz = spec, nz
        self.num_classes = spec.num_classes if conditional else None
        self.init_h, self.init_w = max(2, math.ceil(spec.height / 4)), max(2, math.ceil(spec.width / 4))
        self.embed = nn.Embedding(spec.num_classes, nz) if conditional else None
        self.fc = nn.Sequential(nn.Linear(nz, 2 * width * self.init_h * self.init_w), nn.ReLU())
        self.net = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.ConvTranspose2d(width, spec.channels, 4, 2, 1), nn.Tanh(),
        )
        self.width = width
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


@GENERATORS.register("dcgan_small")
def dcgan_small(spec, *, nz: int = 64, conditional: bool = True) -> nn.Module:
    return DcganGenerator(spec, nz=nz, width=32, conditional=conditional)
