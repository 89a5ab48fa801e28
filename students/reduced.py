"""Students that learn at a reduced resolution, with the reduction inside the model.

A large teacher's inputs (3×224×224) make an ImageNet-sized student the slowest part of a CPU conversion. A
``reduced_*`` student first average-pools its input by an integer factor down to at most 32 px (an antialiased
downsampling that ONNX exports as one ``AveragePool``), then runs a small CNN, so it trains at 32 px while the exported
model still takes the teacher's input size: a user calls it exactly like the teacher.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from dpconvert.io.spec import InputSpec

from .cnn import SmallCNN
from .factory import STUDENTS
from .scatternet import reduction_factor

REDUCED_PX = 32  # the resolution the inner CNN sees (at most): the DataLens student's input size


class ReducedResolution(nn.Module):
    """``AvgPool(factor)`` then ``inner``; ``factor`` = ⌈max(H, W) / REDUCED_PX⌉."""

    def __init__(self, spec: InputSpec, make_inner, target_px: int = REDUCED_PX) -> None:
        super().__init__()
        self.factor = reduction_factor(spec, target_px)
        self.pool = nn.AvgPool2d(self.factor) if self.factor > 1 else nn.Identity()
        inner_spec = dataclasses.replace(spec, height=spec.height // self.factor, width=spec.width // self.factor)
        self.inner = make_inner(inner_spec)
        self.num_features = self.inner.num_features

    def get_classifier(self) -> nn.Module:
        """The inner CNN's head (timm's name for it): DPDFD zeroes it and the logit adjustment shifts its bias."""
        return self.inner.head

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.forward_features(self.pool(x))

    def forward_head(self, f: torch.Tensor) -> torch.Tensor:
        return self.inner.forward_head(f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


@STUDENTS.register("reduced_cnn")
def reduced_cnn(spec: InputSpec) -> nn.Module:
    """The DataLens CNN at ≤ 32 px behind an average-pool."""
    return ReducedResolution(spec, lambda s: SmallCNN(s, width=32, hidden=128))


@STUDENTS.register("reduced_wide_cnn")
def reduced_wide_cnn(spec: InputSpec) -> nn.Module:
    """The wide CNN (twice the DataLens width) at ≤ 32 px behind an average-pool."""
    return ReducedResolution(spec, lambda s: SmallCNN(s, width=64, hidden=256, dropout=0.25))
