"""Empirical audit: a model-inversion attack (evidence, not a guarantee).

"Generating Artificial Data for Private Deep Learning" evaluates privacy by how much a model-inversion attack
recovers of the training images, for the teacher against the private student. Here: for every class, an input is
recovered from the model alone by maximising the class's log-probability (a smoothness penalty keeps it an image),
and scored by its distance to the nearest private record of that class, given to the auditor as ``members``.

The attack needs only the model's outputs (an ONNX student or any teacher dpconvert loads): gradients are estimated
by antithetic Gaussian sampling (natural evolution strategies, Wierstra et al. 2014) on a low-resolution latent
(≤ 16 px a side, upsampled), so it works on black boxes and large inputs alike. The distance is the root-mean-square
pixel difference in [0, 1]; ``baseline`` is the median distance from a private record to its nearest other private
record of the same class, so ``ratio`` < 1 means the recovered image is closer to a training image than training
images typically are to each other. A lower ratio for the teacher than for the student is what the paper reports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

LATENT_PX = 16


@dataclass
class InversionResult:
    target: str
    confidence: float  # mean probability the model gives each recovered image's class
    nearest_distance: float  # mean over classes: RMS pixel distance to the nearest private record of the class
    baseline: float  # median RMS distance from a private record to its nearest other record of the same class
    ratio: float  # nearest_distance / baseline
    steps: int
    queries: int  # model evaluations the attack used

    def to_dict(self) -> dict:
        return {**asdict(self), "kind": "model inversion — empirical evidence, not a DP guarantee"}


def invert(model, spec, *, steps: int = 150, population: int = 24, sigma: float = 0.5, lr: float = 0.1, smooth: float = 0.05,
           seed: int = 0):
    """One recovered image per class, pixels in [0, 1] (K×C×H×W), by NES ascent on log p(class | image) − smooth·TV."""
    import torch
    import torch.nn.functional as F

    k, (c, h, w) = spec.num_classes, spec.shape
    lh, lw = min(h, LATENT_PX), min(w, LATENT_PX)
    g = torch.Generator().manual_seed(seed)
    z = torch.zeros(k, c, lh, lw)
    mean, std = torch.tensor(spec.mean).view(1, -1, 1, 1), torch.tensor(spec.std).view(1, -1, 1, 1)
    target = torch.arange(k)

    def pixels(latent):
        return torch.sigmoid(F.interpolate(latent, size=(h, w), mode="bilinear", align_corners=False))

    def objective(latent, classes):
        p = pixels(latent)
        with torch.no_grad():
            logp = torch.log_softmax(model((p - mean) / std).float(), 1)[torch.arange(len(p)), classes]
        tv = (p[..., 1:, :] - p[..., :-1, :]).abs().mean((1, 2, 3)) + (p[..., 1:] - p[..., :-1]).abs().mean((1, 2, 3))
        return logp - smooth * tv

    m = torch.zeros_like(z)
    v = torch.zeros_like(z)
    half = population // 2
    for t in range(1, steps + 1):
        u = torch.randn((half, *z.shape), generator=g)
        both = torch.cat([z + sigma * u, z - sigma * u]).reshape(-1, c, lh, lw)
        j = objective(both, target.repeat(2 * half)).reshape(2, half, k)
        grad = ((j[0] - j[1]).T[:, :, None, None, None] * u.transpose(0, 1)).mean(1) / (2 * sigma)
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad ** 2  # Adam, ascent
        z = z + lr * (m / (1 - 0.9 ** t)) / ((v / (1 - 0.999 ** t)).sqrt() + 1e-8)
    p = pixels(z)
    with torch.no_grad():
        confidence = torch.softmax(model((p - mean) / std).float(), 1)[torch.arange(k), target]
    return p, confidence, steps * population * k + k


def score(recovered, confidence, records, labels, queries: int, steps: int, target: str, baseline_sample: int = 300) -> InversionResult:
    """Distances of each class's recovered image to that class's private records (all pixels in [0, 1]); distances are
    computed in chunks (60 000 records of 3×64×64 fit: no record × record matrix is ever held)."""
    import torch

    x = torch.as_tensor(records.reshape(len(records), -1), dtype=torch.float32)
    dim = x.shape[1]
    nearest, baseline = [], []
    for cls, image in enumerate(recovered.reshape(len(recovered), -1).float()):
        own = x[torch.as_tensor(labels == cls)]
        if len(own) < 2:
            continue
        nearest.append(float(_nearest(image[None], own)[0]) / dim ** 0.5)
        sample = own[: min(len(own), baseline_sample)]
        d = _nearest(sample, own, exclude_self=True)  # the sample is the first rows of ``own``
        baseline.append(float(np.median(d.numpy())) / dim ** 0.5)
    near, base = float(np.mean(nearest)), float(np.mean(baseline))
    return InversionResult(target, float(confidence.mean()), near, base, near / base if base > 0 else float("inf"), steps, queries)


def _nearest(queries, pool, exclude_self: bool = False, chunk: int = 4096):
    """Euclidean distance from each query to its nearest row of ``pool`` (with ``exclude_self``, query i is pool row i
    and is skipped)."""
    import torch

    best = torch.full((len(queries),), float("inf"))
    for start in range(0, len(pool), chunk):
        d = torch.cdist(queries.double(), pool[start:start + chunk].double())
        if exclude_self:
            rows = torch.arange(len(queries))
            inside = (rows >= start) & (rows < start + len(d[0]))
            d[rows[inside], rows[inside] - start] = float("inf")
        best = torch.minimum(best, d.min(1).values.float())
    return best


def inversion_audit(model_path: str, members: str, *, teacher: Optional[str] = None, load_options=None, steps: int = 150,
                    seed: int = 0) -> dict[str, dict]:
    """{target: result} for the model (and the teacher, when given), scored against the private ``members``."""
    from dpconvert.io.data import load_data
    from dpconvert.io.spec import InputSpec

    from .membership import attack_targets

    targets = attack_targets(model_path, teacher, load_options)
    out = {}
    for name, t in targets.items():
        plain = InputSpec(*t.spec.shape, t.spec.num_classes, mean=(0.0,) * t.spec.channels, std=(1.0,) * t.spec.channels)
        records = load_data(members, plain, require_labels=True)  # pixels in [0, 1], at the model's input size
        recovered, confidence, queries = invert(t, t.spec, steps=steps, seed=seed)
        out[name] = score(recovered, confidence, records.x.numpy(), records.y.numpy(), queries, steps, name).to_dict()
    return out
