"""Candidate data-free priors for the design simulation (``data_free_sim.py --import prior_variants``), not product
priors: each wraps the product's random-field prior with one generic image-statistics knob, so the simulation can
say whether it is worth a product prior (a prior joins ``generators/`` only when it wins over 3 seeds).

* ``dimmed_fields``: the mirrored, centred fields with a random gain in [0.25, 1] (objects of any brightness, not
  only saturated white);
* ``framed_dimmed_fields``: the product's ``framed_fields`` with that gain;
* ``mixed_fields``: MixUp of two ``framed_fields`` samples, λ ∈ [0.3, 0.7].

``framed_fields`` (the mirrored fields stretched to fill the frame) started here, as a per-image crop and resize, and
won (benchmarks/RESULTS.md, table 15): it is a product prior now (``generators/random_fields.py``, the same crop
shares done with one ``grid_sample``).
"""

from __future__ import annotations

import torch
from torch import nn

from dpconvert.generators.random_fields import RandomFieldPrior
from dpconvert.generators.registry import GENERATORS, PRIORS


class Dimmed(nn.Module):
    """A product prior's samples times a random gain in [0.25, 1]."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base, self.spec, self.num_classes, self.nz = base, base.spec, None, base.nz + 1

    def forward(self, z: torch.Tensor, labels=None) -> torch.Tensor:
        mean, std = self.base.mean, self.base.std
        gain = 0.25 + 0.75 * torch.special.ndtr(z[:, -1]).view(-1, 1, 1, 1)
        return ((self.base(z[:, :-1]) * std + mean) * gain - mean) / std


for _name, _framed in (("dimmed_fields", False), ("framed_dimmed_fields", True)):
    PRIORS[_name] = _name.replace("_", " ") + " (a simulation candidate)"
    GENERATORS.register(_name)(lambda spec, *, nz=0, conditional=False, _f=_framed: Dimmed(RandomFieldPrior(spec, centred=1.0, mirrored=0.5, framed=_f)))


class Mixed(nn.Module):
    """MixUp of two samples of a product prior, weight λ ∈ [0.3, 0.7] (in pixel space; the second sample's z is the
    first's reversed and sign-flipped, so one z still determines the image)."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base, self.spec, self.num_classes, self.nz = base, base.spec, None, base.nz + 1

    def forward(self, z: torch.Tensor, labels=None) -> torch.Tensor:
        lam = (0.3 + 0.4 * torch.special.ndtr(z[:, -1])).view(-1, 1, 1, 1)
        a, b = self.base(z[:, :-1]), self.base(-z[:, :-1].flip(1))
        return lam * a + (1 - lam) * b  # normalisation is affine, so mixing normalised images mixes the pixels


PRIORS["mixed_fields"] = "mixed fields (a simulation candidate)"
GENERATORS.register("mixed_fields")(lambda spec, *, nz=0, conditional=False: Mixed(RandomFieldPrior(spec, centred=1.0, mirrored=0.5, framed=True)))


def class_histograms(teacher_path: str, priors: list, n: int = 4000) -> None:
    """The teacher's top class on n samples of each prior, and that histogram's entropy (nats; ln 10 = 2.30 is even)."""
    from dpconvert.generators import create_generator
    from dpconvert.io.teachers import load_teacher

    teacher = load_teacher(teacher_path)
    for name in priors:
        g = create_generator(name, teacher.spec)
        z = torch.randn(n, g.nz, generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            top = torch.cat([teacher(g(c)).float().argmax(1) for c in z.split(1000)])
        h = torch.bincount(top, minlength=teacher.spec.num_classes).float()
        q = h / h.sum()
        print(f"{name:22} entropy {float(-(q * q.clamp_min(1e-9).log()).sum()):.2f}  counts {[int(c) for c in h]}", flush=True)


if __name__ == "__main__":  # python benchmarks/prior_variants.py TEACHER [PRIOR,...]
    import sys

    class_histograms(sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else
                                   "centred_fields,mirrored_fields,framed_fields,dimmed_fields,framed_dimmed_fields").split(","))
