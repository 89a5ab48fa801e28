"""Sampling grids for ``grid_sample``: torch's ``affine_grid`` without its cost.

``F.affine_grid`` builds an (N, H·W, 3) base grid and multiplies it by each θ: on 2 CPU cores that is 9 µs per
28×28 view and 54 µs per 3×64×64 one, more than the bilinear sampling itself, and the data-free priors render every
query at least twice (hashed to keep the release's inputs distinct, then answered). The map is affine, so each output
coordinate is a sum of a row term and a column term: 2.4 and 11 µs. Same values up to float rounding
(tests/test_verdict_and_natural_prior.py), with ``align_corners=False``: pixel centres at (2i + 1)/size − 1.
"""

from __future__ import annotations

import torch


def affine_grid(theta: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``F.affine_grid(theta, (N, C, height, width), align_corners=False)`` for θ of shape (N, 2, 3)."""
    ys = ((torch.arange(height, device=theta.device, dtype=theta.dtype) * 2 + 1) / height - 1).view(1, height, 1)
    xs = ((torch.arange(width, device=theta.device, dtype=theta.dtype) * 2 + 1) / width - 1).view(1, 1, width)
    t = theta.view(-1, 6, 1, 1)
    gx = t[:, 0] * xs + t[:, 1] * ys + t[:, 2]
    gy = t[:, 3] * xs + t[:, 4] * ys + t[:, 5]
    return torch.stack([gx, gy], 3)


def translation_grid(n: int, height: int, width: int, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The grid of n translations by (dx, dy) in grid units (2/size per pixel)."""
    theta = torch.zeros(n, 2, 3, device=dx.device)
    theta[:, 0, 0] = theta[:, 1, 1] = 1.0
    theta[:, 0, 2], theta[:, 1, 2] = dx, dy
    return affine_grid(theta, height, width)
