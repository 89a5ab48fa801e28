"""Ridge regression whose penalty is chosen by Stein's unbiased risk estimate, from sufficient statistics.

DPDFD's released rows carry Gaussian noise of a variance the mechanism fixes and the engine knows exactly, so the
risk of a linear fit on them can be estimated without held-out rows: for a linear smoother Ŷ = S·Y with i.i.d. row
noise of covariance Σ, E‖Ŷ − E Y‖² = E‖Y − Ŷ‖² − n·tr Σ + 2·tr(S)·tr Σ (Stein 1981; Mallows's C_p is the
projection case). For ridge, tr S = Σ dᵢ/(dᵢ + λ) over the eigenvalues dᵢ of XᵀX, so the whole risk curve follows
from the Gram matrix XᵀX, the cross products XᵀY and ‖Y‖², which a minibatch pass accumulates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# penalties tried, as multiples of the mean eigenvalue of XᵀX (plus λ = 0, the least-squares fit): six decades, the
# risk curve is smooth in log λ
PENALTY_GRID = torch.logspace(-4, 2, 61, dtype=torch.float64)


@dataclass(frozen=True)
class RidgeFit:
    weights: torch.Tensor  # (features, outputs): the fit is X @ weights
    penalty: float  # λ in (XᵀX + λI)⁻¹XᵀY; 0: the minimum-norm least-squares fit
    dof: float  # tr S: effective number of fitted parameters per output
    risk: float  # the estimated E‖Ŷ − E Y‖² (all rows, all outputs)


def sure_ridge(gram: torch.Tensor, cross: torch.Tensor, target_ss: float, rows: int, noise_trace: float) -> RidgeFit:
    """The ridge fit with the smallest Stein unbiased risk estimate over λ ∈ {0} ∪ PENALTY_GRID·mean(eig XᵀX).

    gram = XᵀX, cross = XᵀY, target_ss = ‖Y‖² (summed over rows and outputs), rows = n, noise_trace = tr Σ, the noise
    variance of one row summed over its outputs. Directions X never spans (eigenvalues at rounding level) get weight 0,
    as in the pseudo-inverse, so noise_trace = 0 gives the minimum-norm least-squares fit."""
    gram, cross = gram.double(), cross.double()
    eig, basis = torch.linalg.eigh(gram)
    spanned = eig > eig.max().clamp(min=0) * len(eig) * torch.finfo(eig.dtype).eps
    eig = torch.where(spanned, eig, torch.zeros_like(eig))
    proj_ss = (basis.T @ cross).pow(2).sum(1)  # ‖uᵢᵀXᵀY‖² per eigen-direction
    penalties = torch.cat([torch.zeros(1, dtype=eig.dtype), PENALTY_GRID * eig.sum() / max(int(spanned.sum()), 1)])
    shrink = torch.where(spanned, 1.0 / (eig + penalties[:, None]).clamp(min=1e-300), torch.zeros_like(eig))  # (λ, i)
    # ‖Y − XW‖² = ‖Y‖² − 2 Σ fᵢ‖pᵢ‖² + Σ dᵢ fᵢ²‖pᵢ‖² for W = U diag(f) Uᵀ XᵀY
    rss = target_ss - 2 * (shrink * proj_ss).sum(1) + (eig * shrink.pow(2) * proj_ss).sum(1)
    dof = (eig * shrink).sum(1)
    risk = rss - rows * noise_trace + 2 * dof * noise_trace
    best = int(torch.argmin(risk))  # the first minimum: λ = 0 wins ties (noise_trace = 0: least squares)
    weights = basis @ (shrink[best, :, None] * (basis.T @ cross))
    return RidgeFit(weights, float(penalties[best]), float(dof[best]), float(risk[best]))
