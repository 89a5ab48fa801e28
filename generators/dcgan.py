"""A small conditional DCGAN generator (Radford et al. 2016): transposed convolutions from a 4×-downsampled grid.

Cheap enough to train against a DP critic on a CPU (the DP-critic GAN query source, ``mechanisms/dp_gan.py``):
about 7 M multiply-adds per 28×28 sample, a quarter of ``dafl_small``. The class label scales the latent code
(as in ``dafl.py``); the output is mapped to the classifier's normalised input space.
"""

from __future__ import annotations

from torch import nn

from .base import ConditionalImageGenerator
from .registry import GENERATORS


class DcganGenerator(ConditionalImageGenerator):
    def __init__(self, spec, nz: int = 64, width: int = 32, conditional: bool = True) -> None:
        super().__init__(spec, nz, width, conditional)
        self.fc = nn.Sequential(nn.Linear(nz, 2 * width * self.init_h * self.init_w), nn.ReLU())
        self.net = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.ConvTranspose2d(width, spec.channels, 4, 2, 1), nn.Tanh(),
        )


@GENERATORS.register("dcgan_small")
def dcgan_small(spec, *, nz: int = 64, conditional: bool = True) -> nn.Module:
    return DcganGenerator(spec, nz=nz, width=32, conditional=conditional)
