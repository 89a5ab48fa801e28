"""Targets per public source image from a DPDFD release: post-processing of the noisy rows, no teacher access.

When the queries are views of source images (shifts and flips of a public image), the teacher answers all views of
one image nearly alike, so the mean of the m released rows about one image estimates that answer with noise σC/√m
per entry instead of σC. The query-level ε is unchanged (it counts rows); the card's per-image ε says what the m
rows about one image cost together. On Fashion-MNIST (ε = 1, σ = 3.73) a release of 2 000 000 views of 5 000 images
puts 400 rows on each image, and the averaged targets train as well as clean ones (benchmarks/RESULTS.md).

The averaged targets can be denoised further by an empirical-Bayes posterior mean (``bayes``): a Gaussian mixture is
fitted to the averaged rows (whose noise covariance s²·I is known from σ, C, γ and m), and each row is replaced by
Σ_c P(c | y)·(μ_c + Σ_c^s (Σ_c^s + s² I)⁻¹ (y − μ_c)), the posterior mean of its clean value under that mixture
prior (Robbins 1956; a Wiener filter per component). It uses the released rows only.

``shrink_towards`` is the same posterior mean with a different prior: a Gaussian centred on a first student's answer
for each image (the student was trained on these released targets; its answer is put in the targets' own space, γ
times its centred, normalised logits), the prior's spread estimated from all images (E|y − μ|² = s² + v per entry).
It is the ALIBI idea ("Antipodes of Label Differential Privacy: PATE and ALIBI", Malek et al. 2021, the model's own
prediction as the prior of a noisy label) for averaged output-gradient targets: the student pools what similar images'
targets say, so an image whose own mean is mostly noise borrows from them, and one with a clear target keeps it.
"""

from __future__ import annotations

import numpy as np
import torch

from dpconvert.registry import Registry


class SourceTargets:
    """Running sums of released targets per source image, over every release."""

    def __init__(self, num_sources: int, num_classes: int) -> None:
        self.sums = torch.zeros(num_sources, num_classes, dtype=torch.float64)
        self.counts = torch.zeros(num_sources, dtype=torch.long)

    def add(self, sources: torch.Tensor, targets: torch.Tensor) -> None:
        """Rows whose source is −1 (no single source image) are not averaged with anything and are skipped."""
        keep = sources >= 0
        self.sums.index_add_(0, sources[keep], targets[keep].double().cpu())
        self.counts += torch.bincount(sources[keep], minlength=len(self.counts))

    def active(self) -> torch.Tensor:
        return (self.counts > 0).nonzero().squeeze(1)

    def means(self) -> torch.Tensor:
        """(len(active()), K) mean released target of each image that was queried."""
        idx = self.active()
        return (self.sums[idx] / self.counts[idx, None]).float()


# denoiser(means (n, K), per-entry noise variance of each mean (n,), seed) → (n, K)
DENOISERS: Registry = Registry("source-target denoiser")


@DENOISERS.register("none")
def _identity(means: torch.Tensor, noise_var: torch.Tensor, seed: int) -> torch.Tensor:
    return means


@DENOISERS.register("bayes")
def empirical_bayes(means: torch.Tensor, noise_var: torch.Tensor, seed: int, components: int = 10) -> torch.Tensor:
    """Posterior mean of each clean row under a Gaussian-mixture prior fitted to the noisy rows (module docstring)."""
    from sklearn.mixture import GaussianMixture

    y = means.double().numpy()
    n, k = y.shape
    if n < 4 * components or float(noise_var.max()) == 0.0:
        return means
    s2 = float(noise_var.median())  # one noise level: the counts per image differ by a few per cent
    gm = GaussianMixture(components, covariance_type="full", random_state=seed, reg_covar=1e-6).fit(y)
    post = gm.predict_proba(y)
    out = np.zeros_like(y)
    for c in range(components):
        w, v = np.linalg.eigh(gm.covariances_[c])  # observed covariance = signal covariance + s²·I
        signal = (v * np.clip(w - s2, 0.0, None)) @ v.T
        gain = signal @ np.linalg.inv(gm.covariances_[c])
        out += post[:, c:c + 1] * (gm.means_[c] + (y - gm.means_[c]) @ gain.T)
    return torch.from_numpy(out).float()


def shrink_towards(means: torch.Tensor, noise_var: torch.Tensor, student_logits: torch.Tensor, step: float) -> torch.Tensor:
    """Posterior mean of each clean target (``means``, (n, K), per-entry noise variance ``noise_var`` (n,)) under a
    Gaussian prior N(μ, s²·I), μ = ``step`` · the centred, normalised ``student_logits`` (module docstring)."""
    logits = student_logits.double() - student_logits.double().mean(1, keepdim=True)
    mu = step * logits / logits.norm(dim=1, keepdim=True).clamp_min(1e-12)
    y, v = means.double(), noise_var.double().view(-1, 1)
    s2 = max(float(((y - mu) ** 2).mean() - v.mean()), 1e-6)  # the prior's spread: what the noise does not explain
    return (mu + s2 / (s2 + v) * (y - mu)).to(means.dtype)
