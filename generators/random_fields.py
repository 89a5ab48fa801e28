"""A data-independent image prior: level sets of smooth random fields.

Bicubically upsampled low-resolution Gaussian noise f, then either
* blobs: sigmoid(s·(f − level)) — filled silhouettes with smooth edges, or
* strokes: sigmoid(s·(width − |f − level|)) — thin curves along a level set,
  which close into loops and bends like pen strokes.
No data set is involved. A teacher labels these far more diversely than white
noise or an untrained generator, which gives the distillation somewhere to
start (`benchmarks/prior_histogram.py`; this file's history in git).
It has no parameters and ignores class labels; ``z`` carries all randomness.

``centred_fields`` multiplies a share of the samples by a centred soft ellipse
of random size: an object on a dark background, the layout of MNIST-style
data sets. Still no data; a choice of prior made by benchmark
(benchmarks/RESULTS.md, table 2).

``mirrored_fields`` makes a share of the centred samples left–right symmetric
(the field averaged with its mirror image before the level set): clothes, faces,
vehicles and most objects photographed head-on are, and a teacher of such classes
names symmetric shapes more diversely.

``framed_fields`` stretches the mirrored fields to fill more of the frame (the centre 60–100 % of the height and
75–100 % of the width, resized back): objects as large as the canvas, as in most classification data sets. A
teacher of Fashion-MNIST names them more diversely (class-histogram entropy 1.70 against 1.56 nats), and the design
simulation's student gained on three seeds (benchmarks/RESULTS.md, table 15).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .registry import GENERATORS
from .sampling_grid import affine_grid


class RandomFieldPrior(nn.Module):
    def __init__(self, spec, nz: int = 0, conditional: bool = False, centred: float = 0.0, mirrored: float = 0.0,
                 framed: bool = False) -> None:
        super().__init__()
        self.spec = spec
        self.num_classes = None
        hi = max(2, min(spec.height, spec.width) // 2)
        self.resolutions = [r for r in range(2, 8) if r <= hi] or [2]
        self.field_dim = spec.channels * max(self.resolutions) ** 2
        self.centred = centred  # share of samples inside a centred soft ellipse
        self.mirrored = mirrored  # share of samples made left–right symmetric
        # field, then resolution pick, level, sharpness, mode, stroke width (+ ellipse axes and on/off when centred,
        # + symmetric or not when mirrored)
        self.framed = framed  # stretched to fill more of the frame
        self.nz = self.field_dim + 5 + (3 if centred else 0) + (1 if mirrored else 0) + (2 if framed else 0)
        self.register_buffer("mean", torch.tensor(spec.mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(spec.std).view(1, -1, 1, 1))

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        n, c = z.shape[0], self.spec.channels
        size = (self.spec.height, self.spec.width)
        tail = z[:, self.field_dim:]
        u = torch.special.ndtr(tail[:, :5])  # five uniforms after the field
        pick = (u[:, 0] * len(self.resolutions)).long().clamp(max=len(self.resolutions) - 1)
        out = torch.empty(n, c, *size, device=z.device)
        rmax = max(self.resolutions)
        fields = z[:, : self.field_dim].view(n, c, rmax, rmax)
        for i, r in enumerate(self.resolutions):
            m = pick == i
            if m.any():
                out[m] = F.interpolate(fields[m, :, :r, :r], size=size, mode="bicubic", align_corners=False)
        view = (n, 1, 1, 1)
        extra = self.field_dim + 5 + (3 if self.centred else 0)
        if self.mirrored:  # (f + mirror(f))/√2 keeps the field's variance, so levels and sharpness mean the same
            symmetric = (torch.special.ndtr(z[:, extra]) < self.mirrored).view(view)
            out = torch.where(symmetric, (out + out.flip(3)) / 2**0.5, out)
        level = 0.3 * tail[:, 1].view(view)
        sharpness = (4.0 + 8.0 * u[:, 2]).view(view)
        width = (0.15 + 0.35 * u[:, 4]).view(view)
        strokes = (u[:, 3] < 0.5).view(view)
        blob = torch.sigmoid((out - level) * sharpness)
        stroke = torch.sigmoid((width - (out - level).abs()) * 2 * sharpness)
        pixels = torch.where(strokes, stroke, blob)
        if self.centred:
            pixels = pixels * self._ellipse(torch.special.ndtr(tail[:, 5:8]), size)
        if self.framed:
            pixels = self._frame(pixels, torch.special.ndtr(z[:, -2:]))
        return (pixels - self.mean) / self.std

    @staticmethod
    def _frame(pixels: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The centre (0.75–1 of the width, 0.6–1 of the height) of each image resized to the whole canvas."""
        theta = torch.zeros(len(pixels), 2, 3, device=pixels.device)
        theta[:, 0, 0], theta[:, 1, 1] = 0.75 + 0.25 * u[:, 0], 0.6 + 0.4 * u[:, 1]
        grid = affine_grid(theta, pixels.shape[2], pixels.shape[3])
        return F.grid_sample(pixels, grid, mode="bilinear", padding_mode="border", align_corners=False)

    def _ellipse(self, e: torch.Tensor, size) -> torch.Tensor:
        """A centred soft ellipse (semi-axes 0.35–0.95 of the half-size) where e[:, 2] < centred, else ones."""
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, size[0], device=e.device), torch.linspace(-1, 1, size[1], device=e.device),
                                indexing="ij")
        ax, ay = (0.35 + 0.6 * e[:, 0]).view(-1, 1, 1, 1), (0.35 + 0.6 * e[:, 1]).view(-1, 1, 1, 1)
        inside = torch.sigmoid((1 - ((xx / ax) ** 2 + (yy / ay) ** 2).sqrt()) * 8.0)
        return torch.where((e[:, 2] < self.centred).view(-1, 1, 1, 1), inside, torch.ones_like(inside))


@GENERATORS.register("random_fields")
def random_fields(spec, *, nz: int = 0, conditional: bool = False) -> nn.Module:
    return RandomFieldPrior(spec)


@GENERATORS.register("centred_fields")
def centred_fields(spec, *, nz: int = 0, conditional: bool = False) -> nn.Module:
    return RandomFieldPrior(spec, centred=1.0)


@GENERATORS.register("mirrored_fields")
def mirrored_fields(spec, *, nz: int = 0, conditional: bool = False) -> nn.Module:
    return RandomFieldPrior(spec, centred=1.0, mirrored=0.5)


@GENERATORS.register("framed_fields")
def framed_fields(spec, *, nz: int = 0, conditional: bool = False) -> nn.Module:
    return RandomFieldPrior(spec, centred=1.0, mirrored=0.5, framed=True)
