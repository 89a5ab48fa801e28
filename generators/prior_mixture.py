"""A data-free prior that mixes two prior families: each query comes from one of them with probability ½.

Which family suits a teacher cannot be read from its input shape alone: a 3×64×64 ResNet-34 trained on Fashion-MNIST
upsampled to RGB calls 88 % of natural crops "bag", a published CIFAR-10 model calls 62 % of framed random fields
"automobile". Querying both hedges: in the design simulation (ε = 1) the ResNet-34's student reached 54.1 % on half
and half against 31 % on natural crops alone, but the CIFAR-10 model's agreed on 26.7 % against 36.7 % on natural
crops alone (benchmarks/RESULTS.md, table 15). So the default does not mix: a prior trial picks one family from a small
release (methods/prior_trial.py); `prior` fields_and_crops asks for the mixture.

``z[:, 0]`` picks the family (Φ(z₀) < ½: the first); the rest of ``z`` is that family's own latent, so the mixture
keeps the "all randomness in z" contract of every prior (deterministic under ``--seed``).
"""

from __future__ import annotations

import torch
from torch import nn

from .natural_images import DESCRIPTION as NATURAL_DESCRIPTION
from .registry import GENERATORS, PRIORS


class PriorMixture(nn.Module):
    """Two parameter-free priors, each rendering the rows of ``z`` that picked it."""

    def __init__(self, spec, parts: tuple[nn.Module, ...]) -> None:
        super().__init__()
        self.spec, self.num_classes = spec, None
        self.parts = nn.ModuleList(parts)
        self.nz = 1 + max(p.nz for p in parts)

    def family(self, z: torch.Tensor) -> torch.Tensor:
        """Which part renders each row of ``z``: 0 … len(parts) − 1."""
        u = torch.special.ndtr(z[:, 0].float())
        return (u * len(self.parts)).long().clamp(max=len(self.parts) - 1)

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        which = self.family(z)
        out = torch.empty(len(z), self.spec.channels, self.spec.height, self.spec.width, device=z.device)
        for k, part in enumerate(self.parts):
            rows = (which == k).nonzero().flatten()
            if len(rows):
                out[rows] = part(z[rows, 1:1 + part.nz]).to(out.dtype)
        return out


# the card's query source names both families, the photographs and their licences included
PRIORS["fields_and_crops"] = f"a mixture, each image from one of two priors (½ each): {PRIORS['framed_fields']}; {NATURAL_DESCRIPTION}"


@GENERATORS.register("fields_and_crops")
def fields_and_crops(spec, *, nz: int = 0, conditional: bool = False) -> nn.Module:
    return PriorMixture(spec, (GENERATORS.get("framed_fields")(spec), GENERATORS.get("natural_crops")(spec)))
