"""Feature maps φ for Private-kNN that never see private data (docs/methods.md).

HOG (Dalal & Triggs 2005) is the first-round feature of the Private-kNN paper; it is a fixed
function of the image, computed here in torch so it batches: Sobel gradients,
9 unsigned orientation bins with linear interpolation, per-cell histograms,
L2-Hys normalisation over 2×2-cell blocks.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from dpconvert.registry import Registry

FEATURES: Registry = Registry("feature map", param="features")


def hog(x: torch.Tensor, cell: int = 4, bins: int = 9) -> torch.Tensor:
    """HOG descriptors for a batch (N, C, H, W) → (N, D). Channels are averaged first."""
    g = x.mean(1, keepdim=True)
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], device=x.device).view(1, 1, 3, 3)
    gx = F.conv2d(F.pad(g, (1, 1, 1, 1), mode="replicate"), kx)
    gy = F.conv2d(F.pad(g, (1, 1, 1, 1), mode="replicate"), kx.transpose(2, 3))
    mag = torch.sqrt(gx**2 + gy**2)
    ang = torch.atan2(gy, gx) % math.pi  # unsigned orientation in [0, π)
    pos = ang / math.pi * bins - 0.5
    lo = torch.floor(pos)
    w_hi = pos - lo
    lo_idx = lo.long() % bins
    hi_idx = (lo_idx + 1) % bins
    n, _, h, w = g.shape
    hist = torch.zeros(n, bins, h, w, device=x.device)
    hist.scatter_add_(1, lo_idx, mag * (1 - w_hi))
    hist.scatter_add_(1, hi_idx, mag * w_hi)
    cell = max(1, min(cell, h // 2, w // 2))
    cells = F.avg_pool2d(hist, cell)  # (N, bins, Hc, Wc)
    if cells.shape[-1] >= 2 and cells.shape[-2] >= 2:
        blocks = cells.unfold(2, 2, 1).unfold(3, 2, 1)  # (N, bins, Hb, Wb, 2, 2)
        blocks = blocks.permute(0, 2, 3, 1, 4, 5).reshape(n, blocks.shape[2], blocks.shape[3], -1)
    else:
        blocks = cells.permute(0, 2, 3, 1).reshape(n, 1, 1, -1)
    blocks = blocks / (blocks.norm(dim=-1, keepdim=True) + 1e-6)
    blocks = blocks.clamp(max=0.2)  # L2-Hys
    blocks = blocks / (blocks.norm(dim=-1, keepdim=True) + 1e-6)
    return blocks.reshape(n, -1)


def _hog_cell(spec) -> int:
    return 4 if min(spec.height, spec.width) >= 16 else 2


@FEATURES.register("hog")
def hog_features(spec, public_x=None):
    cell = _hog_cell(spec)
    return lambda x: hog(x, cell=cell)


def public_pca(raw: Callable, public_x, dims: int, whiten: float, name: str) -> Callable:
    """raw features projected on the top principal directions of the *public* images' raw features, whitened, L2-normalised.

    Fitted on the unlabelled public images only (never on private data), so φ
    stays independent of the private set. Whitening keeps directions with small
    variance from being drowned by the dominant ones.
    """
    if public_x is None or len(public_x) < 2:
        raise ValueError(f"{name} needs the public images to fit its projection")
    f = batched_features(raw, public_x)
    mu = f.mean(0)
    _, s, vh = torch.linalg.svd(f - mu, full_matrices=False)
    d = max(1, min(dims, len(s)))
    proj = vh[:d].T / (s[:d] / s[0]).clamp_min(1e-6).pow(whiten)
    return lambda x: F.normalize((raw(x) - mu) @ proj, dim=1)


@FEATURES.register("hog_pca")
def hog_pca_features(spec, public_x=None, *, dims: int = 48, whiten: float = 1.0):
    """HOG on the public images' top principal directions, whitened (``public_pca``).

    On Fashion-MNIST this lifts the noise-free k=300 vote accuracy on a 10 % subsample from 76 % (HOG) to 83 % with
    32 directions and 85 % with 48 (benchmarks/pknn_features.py); 48 gives the better student (RESULTS.md, table 4).
    """
    cell = _hog_cell(spec)
    phi = public_pca(lambda x: hog(x, cell=cell), public_x, dims, whiten, "hog_pca")
    phi.description = f"hog_pca: HOG (cell {cell}) on the public images' top {dims} principal directions, whitening power {whiten:g}"
    return phi


TIMM_FEATURE_MIN_PX = 64  # small images are upsampled to this for an ImageNet backbone (224 px would cost ~10× more on CPU)


def create_features(name: str, spec, public_x=None):
    """φ by name: a registered map, or ``timm:NAME[@WEIGHTS]`` (a public pretrained timm backbone)."""
    if name.startswith("timm:"):
        return timm_backbone_features(spec, name[len("timm:"):])
    return FEATURES.get(name)(spec, public_x)


def timm_backbone_features(spec, ref: str):
    """Pooled features of a *public* pretrained timm backbone (``NAME`` from the hub, or ``NAME@FILE`` offline).

    Private-kNN needs φ independent of the private data: the user vouches that
    the weights were trained on public data only (the card records which). The
    teacher-normalised input is mapped back to pixels, grey images are repeated
    to three channels, small images are upsampled, then the backbone's own
    normalisation is applied; features are L2-normalised like the other maps.
    """
    import timm

    from dpconvert.errors import DpconvertError

    name, _, weights = ref.partition("@")
    if not timm.is_model(name.split(".")[0]):
        raise DpconvertError(f"`features` timm:{ref}: unknown timm model {name!r}", fix="see timm.list_models()", param="features")
    kwargs = {"pretrained_cfg_overlay": dict(file=weights)} if weights else {}
    try:
        model = timm.create_model(name, pretrained=True, num_classes=0, **kwargs).eval()
    except Exception as e:  # hub unreachable, missing or unfitting weights file
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise DpconvertError(f"`features` timm:{ref}: could not load public pretrained weights ({msg})",
                             fix="give local weights as timm:NAME@FILE", param="features") from None
    cfg = model.pretrained_cfg
    in_mean = torch.tensor(spec.mean).view(1, -1, 1, 1)
    in_std = torch.tensor(spec.std).view(1, -1, 1, 1)
    bb_mean = torch.tensor(cfg.get("mean", (0.485, 0.456, 0.406))).view(1, -1, 1, 1)
    bb_std = torch.tensor(cfg.get("std", (0.229, 0.224, 0.225))).view(1, -1, 1, 1)
    size = max(TIMM_FEATURE_MIN_PX, spec.height, spec.width)

    def phi(x: torch.Tensor) -> torch.Tensor:
        pixels = x * in_std + in_mean
        if pixels.shape[1] == 1:
            pixels = pixels.expand(-1, 3, -1, -1)
        if pixels.shape[-1] < size or pixels.shape[-2] < size:
            pixels = F.interpolate(pixels, size=(size, size), mode="bilinear", align_corners=False)
        with torch.no_grad():
            return F.normalize(model((pixels - bb_mean) / bb_std).flatten(1), dim=1)

    return phi


def batched_features(phi, x: torch.Tensor, size: int = 2048) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([phi(c) for c in x.split(size)])
