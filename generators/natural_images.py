"""A data-free prior of natural-image crops, after "The Augmented Image Prior: Distilling 1000 Classes by
Extrapolating from a Single Image" (Asano & Saeed, ICLR 2023): a teacher distils into a student from nothing but
heavily augmented crops of a few natural images (random resized crops, flips, colour jitter, CutMix).

The images are public photographs that the dependencies already ship (scikit-image's ``skimage.data``,
scikit-learn's sample images, matplotlib's sample data); :data:`IMAGES` names each with its licence, and the card
names them through :data:`DESCRIPTION`. They are nobody's private data, so a query made of them costs nothing
beyond the teacher's query-level ε and has no per-image ε.

Each query is one draw of ``z`` (all randomness, so the run stays deterministic under ``--seed``): an image, a crop
of 1–50 % of its area at an aspect ratio in [3/4, 4/3] and a random place, a horizontal flip, brightness, contrast,
saturation and hue jitter, sometimes grey; and with probability ½ a CutMix box of a second such crop pasted over
10–50 % of it. Crops are cut from an image pyramid at the level nearest twice the output size, so a large crop
shrunk to 32 px does not alias.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .registry import GENERATORS, PRIORS
from .sampling_grid import affine_grid


class NaturalImage(NamedTuple):
    name: str
    package: str  # which dependency ships it
    licence: str


IMAGES = (
    NaturalImage("astronaut", "scikit-image", "public domain (NASA)"),
    NaturalImage("chelsea", "scikit-image", "CC0 (Stefan van der Walt)"),
    NaturalImage("coffee", "scikit-image", "CC0 (Rachel Michetti)"),
    NaturalImage("rocket", "scikit-image", "public domain (SpaceX)"),
    NaturalImage("china", "scikit-learn", "CC BY 2.0 (danielbuechele, Flickr)"),
    NaturalImage("flower", "scikit-learn", "CC BY 2.0 (vultilion, Flickr)"),
    NaturalImage("grace_hopper", "matplotlib", "public domain (U.S. Navy)"),
)
DESCRIPTION = ("natural-image prior: random resized crops, flips, colour jitter and CutMix of "
               + "; ".join(f"{i.name} ({i.package}, {i.licence})" for i in IMAGES))
CUTMIX = 0.5  # share of queries with a second crop pasted in
AREA = (0.01, 0.5)  # crop area as a share of the image's, log-uniform
LEVELS = 5  # image pyramid: full size and four halvings


def _read(image: NaturalImage):
    """The image as uint8 H×W×3 from the package that ships it (no download: all three bundle these files)."""
    import numpy as np

    if image.package == "scikit-image":
        import skimage.data

        return getattr(skimage.data, image.name)()
    if image.package == "scikit-learn":
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{image.name}.jpg")
    import matplotlib.cbook

    with matplotlib.cbook.get_sample_data(f"{image.name}.jpg") as f:
        from PIL import Image

        return np.asarray(Image.open(f).convert("RGB"))


@functools.lru_cache(maxsize=1)
def image_pyramids() -> tuple:
    """Per image, ``LEVELS`` float tensors 3×h×w in [0, 1], each half the size of the one before (area-averaged)."""
    pyramids = []
    for image in IMAGES:
        x = torch.from_numpy(_read(image).copy()).permute(2, 0, 1).float().div(255).unsqueeze(0)
        levels = [x[0]]
        for _ in range(LEVELS - 1):
            x = F.avg_pool2d(x, 2, ceil_mode=True)
            levels.append(x[0])
        pyramids.append(tuple(levels))
    return tuple(pyramids)


class NaturalCropPrior(nn.Module):
    """Augmented crops of :data:`IMAGES` at the classifier's input size, normalised to its mean/std."""

    CROP_Z = 11  # uniforms per crop: image, area, aspect, x, y, flip, brightness, contrast, saturation, hue, grey

    def __init__(self, spec, nz: int = 0, conditional: bool = False) -> None:
        super().__init__()
        self.spec = spec
        self.num_classes = None
        self.nz = 2 * self.CROP_Z + 4  # two crops, then CutMix on/off, box area, box x, box y
        self.register_buffer("mean", torch.tensor(spec.mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(spec.std).view(1, -1, 1, 1))

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        u = torch.special.ndtr(z[:, : self.nz].float().cpu())
        k = self.CROP_Z
        x = self._crops(u[:, :k])
        mixed = u[:, 2 * k] < CUTMIX
        if mixed.any():
            x[mixed] = self._cutmix(x[mixed], self._crops(u[mixed, k: 2 * k]), u[mixed, 2 * k + 1:])
        if self.spec.channels == 1:
            x = _grey(x)
        elif self.spec.channels != 3:
            x = x.mean(1, keepdim=True).expand(-1, self.spec.channels, -1, -1)
        return (x.to(z.device) - self.mean) / self.std

    def _crops(self, u: torch.Tensor) -> torch.Tensor:
        """One augmented crop per row of uniforms ``u`` (n × CROP_Z), in [0, 1] pixels, 3 × H × W."""
        h, w = self.spec.height, self.spec.width
        pyramids = image_pyramids()
        which = (u[:, 0] * len(pyramids)).long().clamp(max=len(pyramids) - 1)
        area = AREA[0] * (AREA[1] / AREA[0]) ** u[:, 1]
        ratio = torch.exp((u[:, 2] * 2 - 1) * math.log(4 / 3)) * (w / h)
        out = torch.empty(len(u), 3, h, w)
        for i, levels in enumerate(pyramids):
            rows = (which == i).nonzero().flatten()
            if not len(rows):
                continue
            H, W = levels[0].shape[1:]
            crop_w = (area[rows] * H * W * ratio[rows]).sqrt().clamp(max=W)  # pixels at full size
            crop_h = (area[rows] * H * W / ratio[rows]).sqrt().clamp(max=H)
            level = torch.log2(crop_w / (2 * w)).floor().clamp(0, LEVELS - 1).long()  # ≥ ½ source pixel per output pixel
            fw, fh = crop_w / W, crop_h / H  # half-widths in grid_sample's [−1, 1] coordinates are fw, fh
            cx = (u[rows, 3] * 2 - 1) * (1 - fw)
            cy = (u[rows, 4] * 2 - 1) * (1 - fh)
            flip = torch.where(u[rows, 5] < 0.5, -1.0, 1.0)
            theta = torch.zeros(len(rows), 2, 3)
            theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = fw * flip, cx, fh, cy
            for lv in level.unique().tolist():
                m = level == lv
                src = levels[lv].unsqueeze(0).expand(int(m.sum()), -1, -1, -1)
                grid = affine_grid(theta[m], h, w)
                out[rows[m]] = F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=False)
        return _jitter(out, u[:, 6:11])

    @staticmethod
    def _cutmix(x: torch.Tensor, other: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``other`` pasted into a box of 10–50 % of the area (square up to the image's aspect) at a random place."""
        n, _, h, w = x.shape
        side = (0.1 + 0.4 * u[:, 0]).sqrt()
        bh, bw = (side * h).round().clamp(min=1), (side * w).round().clamp(min=1)
        top, left = ((h - bh) * u[:, 1]).floor(), ((w - bw) * u[:, 2]).floor()
        ys, xs = torch.arange(h).view(1, h, 1), torch.arange(w).view(1, 1, w)
        box = ((ys >= top.view(-1, 1, 1)) & (ys < (top + bh).view(-1, 1, 1)) & (xs >= left.view(-1, 1, 1))
               & (xs < (left + bw).view(-1, 1, 1))).unsqueeze(1)
        return torch.where(box, other, x)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """Luma (ITU-R BT.601 weights), one channel."""
    return (x * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)


def _jitter(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Brightness and contrast ×[0.6, 1.4], saturation ×[0.4, 1.6], hue rotated by up to ±36°, grey with p = 0.1."""
    view = (-1, 1, 1, 1)
    x = x * (0.6 + 0.8 * u[:, 0]).view(view)
    level = _grey(x).mean((2, 3), keepdim=True)
    x = level + (x - level) * (0.6 + 0.8 * u[:, 1]).view(view)
    grey = _grey(x)
    x = grey + (x - grey) * (0.4 + 1.2 * u[:, 2]).view(view)
    x = _rotate_hue(x, (u[:, 3] * 2 - 1) * math.pi / 5)
    x = torch.where((u[:, 4] < 0.1).view(view), _grey(x).expand_as(x), x)
    return x.clamp(0, 1)


def _rotate_hue(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate the chroma plane of YIQ by ``angle`` (radians, one per image): the luma stays."""
    to_yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
    c, s = torch.cos(angle), torch.sin(angle)
    rot = torch.zeros(len(x), 3, 3)
    rot[:, 0, 0], rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = 1, c, -s, s, c
    m = torch.linalg.inv(to_yiq) @ rot @ to_yiq  # n × 3 × 3
    return torch.einsum("nij,njhw->nihw", m, x)


PRIORS["natural_crops"] = DESCRIPTION  # the card's query source names every image and its licence


@GENERATORS.register("natural_crops")
def natural_crops(spec, *, nz: int = 0, conditional: bool = False) -> nn.Module:
    return NaturalCropPrior(spec)
