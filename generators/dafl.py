"""DAFL-style generator (Chen et al. 2019, "Data-Free Learning of Student Networks"), sized as docs/methods.md says.

Linear → BN → up×2 → conv3 → BN → LReLU → up×2 → conv3 → BN → LReLU → conv3 → tanh,
then mapped to the classifier's normalised input space. With ``conditional``
the class label scales the latent code through an embedding, so a generator
can be asked for a class (the label is public: chosen by us, not the data).
"""

from __future__ import annotations

from torch import nn

from .base import ConditionalImageGenerator
from .registry import GENERATORS


class DaflGenerator(ConditionalImageGenerator):
    def __init__(self, spec, nz: int = 100, width: int = 64, conditional: bool = True) -> None:
        super().__init__(spec, nz, width, conditional)
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


@GENERATORS.register("dafl")
def dafl(spec, *, nz: int = 100, conditional: bool = True) -> nn.Module:
    return DaflGenerator(spec, nz=nz, width=64, conditional=conditional)


@GENERATORS.register("dafl_small")
def dafl_small(spec, *, nz: int = 100, conditional: bool = True) -> nn.Module:
    return DaflGenerator(spec, nz=nz, width=32, conditional=conditional)
