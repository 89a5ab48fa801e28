"""The Adaptive Laplace Mechanism, corrected: two Laplace releases of per-class feature sums (pure ε-DP, δ = 0).

What runs (the method's docs say why each step differs from "Adaptive Laplace Mechanism: Differential Privacy
Preservation in Deep Learning"):

1. Each record is mapped, on its own, to non-negative fixed features g(x) (ScatterNet, pooled, square root) and
   L1-normalised: φ = g / ‖g‖₁. Nothing about the data set enters this map.
2. **Relevance** (ε₁): R̄ = Σᵢ e_{yᵢ} φᵢᵀ + Lap(1/ε₁) per entry. Adding or removing one record changes one row of
   this K×d matrix by φᵢ, whose L1 norm is 1: sensitivity 1. The relevance of feature j is the spread of the noisy
   class means in column j (post-processing).
3. **Adaptive Laplace** (ε₂): the features are re-weighted by relevance, ψ = (w ⊙ g)/‖w ⊙ g‖₁, and the class sums
   M = Σᵢ e_{yᵢ} ψᵢᵀ + Lap(1/ε₂) are released. ‖ψ‖₁ = 1, so the sensitivity is again 1; measured on the original
   features, feature j receives noise ∝ 1/w_j — more noise where the relevance is lower, the paper's idea.
4. The loss Σᵢ ‖ψᵢ − μ_{yᵢ}‖² is a polynomial whose data-dependent coefficients are exactly M (its per-class counts
   are M's row sums, because ‖ψ‖₁ = 1): the noisy objective is exact (no Taylor remainder), its minimiser
   μ_k = M_k / n̂_k is closed-form, and training any number of epochs costs nothing more.

ε = ε₁ + ε₂ by sequential composition (the second release's weights depend on the first: adaptive composition of
pure-DP mechanisms, whose ε values are fixed in advance). The Laplace noise is drawn by inverse CDF from the
mechanism's generator (secret by default, mechanisms/noise.py).
"""

from __future__ import annotations

import torch

from dpconvert.mechanisms.noise import as_generator


def laplace(shape: tuple, scale: float, generator: torch.Generator) -> torch.Tensor:
    """Lap(0, scale) samples (float64) from ``generator``: X = −b·sgn(U)·ln(1 − 2|U|), U ~ Uniform(−½, ½)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2 * u.abs())


def class_sums(features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Σᵢ e_{yᵢ} fᵢᵀ (K × d), float64."""
    out = torch.zeros(num_classes, features.shape[1], dtype=torch.float64)
    return out.index_add_(0, labels.long(), features.double())


def relevance_weights(noisy_sums: torch.Tensor, power: float, floor: float = 0.1) -> torch.Tensor:
    """w_j = (r_j / mean r)^power, r_j = std over classes of the noisy class means in column j; floored so that no
    feature is silenced entirely. Post-processing of the relevance release."""
    counts = noisy_sums.sum(1, keepdim=True).clamp(min=1.0)
    spread = (noisy_sums / counts).std(0)
    return ((spread / spread.mean().clamp(min=1e-12)).clamp(min=floor) ** power).float()


class AdaptiveLaplace:
    """The two releases; the object that draws the noise records each release with the scale it used."""

    def __init__(self, *, eps_relevance: float, eps_coefficients: float, relevance_power: float, accountant, noise) -> None:
        """``noise``: the run's ``NoiseStream`` (or a bare generator)."""
        self.eps_relevance, self.eps_coefficients, self.relevance_power = eps_relevance, eps_coefficients, relevance_power
        self.accountant, self.generator = accountant, as_generator(noise)

    def release(self, sums: torch.Tensor, eps: float) -> torch.Tensor:
        """sums + Lap(1/ε) per entry, for class sums of L1-normalised rows (L1 sensitivity 1 under add/remove)."""
        scale = 1.0 / eps
        noisy = sums.double() + laplace(tuple(sums.shape), scale, self.generator)
        self.accountant.record("laplace", scale=scale, l1_sensitivity=1.0)
        return noisy

    def relevance(self, phi: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
        return relevance_weights(self.release(class_sums(phi, labels, num_classes), self.eps_relevance), self.relevance_power)

    def prototypes(self, psi: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
        """μ_k = M_k / n̂_k from the noisy class sums (n̂_k = the row sum, floored at 1)."""
        noisy = self.release(class_sums(psi, labels, num_classes), self.eps_coefficients)
        return (noisy / noisy.sum(1, keepdim=True).clamp(min=1.0)).float()

    def fit(self, records, student, num_classes: int, minibatch: int) -> None:
        """Open the private records and set ``student``'s relevance and prototypes from the two releases: each record's
        fixed features computed on their own, L1-normalised (the sensitivity bound ‖ψ‖₁ ≤ 1 enforced in float64,
        students/scatternet.py: normalise), summed per class, noised."""
        from dpconvert.profiling import phase

        private = records.open_records()
        with phase("fixed features", items=len(private.x)), torch.no_grad():
            g = torch.cat([student.fixed_features(c) for c in private.x.split(minibatch)])
        with phase("Laplace releases", items=2):
            y, g = private.y.long(), g.double()
            student.relevance.copy_(self.relevance(student.normalise(g, torch.ones(g.shape[1], dtype=g.dtype)), y, num_classes))
            student.set_prototypes(self.prototypes(student.normalise(g, student.relevance.double()), y, num_classes))
