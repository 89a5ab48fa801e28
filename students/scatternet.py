"""ScatterNet students: a fixed scattering transform in front of a small trained head.

"Differentially Private Learning Needs Better Features (or Much More Data)" (Tramèr & Boneh, 2021) shows that a
linear model on second-order scattering coefficients, trained with DP-SGD, beats end-to-end CNNs at small ε on
MNIST-sized images. The transform has no trained weights, so it is applied to each record on its own and costs no
privacy; only the head sees gradients.

The wavelets come from kymatio's filter bank (Morlet wavelets ψ_{j,θ} and the Gaussian low-pass φ_J, built in the
Fourier domain). We apply them as fixed spatial convolutions (kernels cropped to ≥ 99.9 % of each filter's energy)
instead of kymatio's FFT frontend so that the student is a plain module that exports to ONNX like any other:

    S0 = x ⋆ φ_J,   S1 = |x ⋆ ψ_{j1,θ1}| ⋆ φ_J,   S2 = ||x ⋆ ψ_{j1,θ1}| ⋆ ψ_{j2,θ2}| ⋆ φ_J  (j1 < j2),

each low-passed output subsampled by 2^J: 1 + J·L + L²·J(J−1)/2 channels per input channel (81 for J=2, L=8).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from dpconvert.io.spec import InputSpec

from .factory import STUDENTS

_FILTER_GRID = 64  # the filters are built on a 64×64 grid and cropped: independent of the input size
_ENERGY_KEPT = 0.999


def _filter_bank(J: int, L: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """([ψ_j as (2L, 1, K, K): real/imaginary parts of the L orientations interleaved], φ_J as (1, 1, K, K))."""
    import numpy as np
    # kymatio's top-level import pulls its 3-D frontend, which needs a SciPy function removed in SciPy 1.17;
    # the 2-D filter bank module has no such import.
    from kymatio.scattering2d.filter_bank import filter_bank

    bank = filter_bank(_FILTER_GRID, _FILTER_GRID, J, L=L)

    def spatial(fourier):
        return np.fft.fftshift(np.fft.ifft2(fourier))

    c = _FILTER_GRID // 2

    def half_width(f) -> int:
        energy = np.abs(f) ** 2
        return next(h for h in range(1, c + 1) if energy[c - h:c + h + 1, c - h:c + h + 1].sum() >= _ENERGY_KEPT * energy.sum())

    def crop(fs):  # one size for all orientations of a scale
        h = max(half_width(f) for f in fs)
        return [f[c - h:c + h + 1, c - h:c + h + 1] for f in fs]

    psi = []
    for j in range(J):
        fs = crop([spatial(p["levels"][0]) for p in bank["psi"] if p["j"] == j])
        parts = [part for f in fs for part in (f.real, f.imag)]
        psi.append(torch.tensor(np.stack(parts)[:, None], dtype=torch.float32))
    phi = crop([spatial(bank["phi"]["levels"][0])])[0].real
    return psi, torch.tensor(phi[None, None], dtype=torch.float32)


class ScatterNet(nn.Module):
    """Second-order 2-D scattering (J scales, L orientations) of each input channel, as fixed convolutions."""

    @staticmethod
    def channels_per_input(J: int, L: int = 8) -> int:
        return 1 + J * L + L * L * J * (J - 1) // 2

    def __init__(self, channels: int, J: int = 2, L: int = 8) -> None:
        super().__init__()
        self.channels, self.J, self.L = channels, J, L
        psi, phi = _filter_bank(J, L)
        for j, w in enumerate(psi):
            self.register_buffer(f"psi{j}", w)
        self.register_buffer("phi", phi)
        self.out_channels = channels * self.channels_per_input(J, L)

    def _wavelet(self, x: torch.Tensor, j: int) -> torch.Tensor:
        """|x ⋆ ψ_{j,θ}| for every θ: (m, 1, H, W) → (m, L, H, W)."""
        w = getattr(self, f"psi{j}")
        pad = w.shape[-1] // 2
        z = F.conv2d(F.pad(x, (pad,) * 4, mode="reflect"), w)
        z = z.reshape(z.shape[0], self.L, 2, *z.shape[2:])  # (real, imaginary) pairs
        return torch.sqrt(z[:, :, 0] ** 2 + z[:, :, 1] ** 2 + 1e-12)  # the ε keeps the modulus differentiable at 0

    def _lowpass(self, x: torch.Tensor) -> torch.Tensor:
        pad = self.phi.shape[-1] // 2
        m, c = x.shape[:2]
        out = F.conv2d(F.pad(x.reshape(m * c, 1, *x.shape[2:]), (pad,) * 4, mode="reflect"), self.phi, stride=2 ** self.J)
        return out.reshape(m, c, *out.shape[2:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        x = x.reshape(n * c, 1, h, w)
        first = [self._wavelet(x, j) for j in range(self.J)]
        second = [self._wavelet(u.reshape(-1, 1, h, w), j2).reshape(n * c, -1, h, w)
                  for j1, u in enumerate(first) for j2 in range(j1 + 1, self.J)]
        s = self._lowpass(torch.cat([x, *first, *second], 1))
        return s.reshape(n, self.out_channels, *s.shape[2:])


class ScatterStudent(nn.Module):
    """ScatterNet → GroupNorm (per example, no parameters) → head. ``fixed_features`` marks the part without weights:
    the DP-SGD method computes it once per record and trains ``head`` alone."""

    def __init__(self, spec: InputSpec, head: str = "linear", J: int = 2, groups_per_channel: int = 27, pre_pool: int = 1) -> None:
        super().__init__()
        # ``pre_pool`` > 1: an average pool by that integer factor first, also without weights (a large teacher's input
        # scattered at ≤ 32 px: ``reduced_scatternet_linear``); the exported model still takes the teacher's input size
        scatter = ScatterNet(spec.channels, J=J)
        self.fixed_features = nn.Sequential(nn.AvgPool2d(pre_pool), scatter) if pre_pool > 1 else scatter
        c = scatter.out_channels
        with torch.no_grad():
            h, w = self.fixed_features(torch.zeros(1, *spec.shape)).shape[2:]
        groups = math.gcd(c, groups_per_channel * spec.channels)
        layers: list[nn.Module] = [nn.GroupNorm(groups, c, affine=False)]
        if head == "linear":
            layers += [nn.Flatten(), nn.Linear(c * h * w, spec.num_classes)]
        else:  # "cnn": the small tanh CNN on scattering features of the same paper
            layers += [nn.Conv2d(c, 64, 3, padding=1), nn.Tanh(), nn.Conv2d(64, 64, 3, padding=1), nn.Tanh(),
                       nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, spec.num_classes)]
        self.head = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fixed_features(x))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Everything before the last Linear (Private-kNN's later-round features, DPDFD's generator loss)."""
        return self.head[:-1](self.fixed_features(x))

    def forward_head(self, f: torch.Tensor) -> torch.Tensor:
        return self.head[-1](f)


@STUDENTS.register("scatternet_linear")
def scatternet_linear(spec: InputSpec) -> nn.Module:
    return ScatterStudent(spec, head="linear", J=_scales(spec))


@STUDENTS.register("scatternet_cnn")
def scatternet_cnn(spec: InputSpec) -> nn.Module:
    return ScatterStudent(spec, head="cnn", J=_scales(spec))


@STUDENTS.register("reduced_scatternet_linear")
def reduced_scatternet_linear(spec: InputSpec) -> nn.Module:
    """``scatternet_linear`` on the input average-pooled by an integer factor to ≤ 32 px (a large teacher's DP-SGD
    student on a CPU: the coefficients every private record keeps stay within ``dpsgd.SCATTER_MAX_FEATURES``)."""
    factor = reduction_factor(spec)
    return ScatterStudent(spec, head="linear", J=_scales(_pooled(spec, factor)), pre_pool=factor)


def reduction_factor(spec: InputSpec, target_px: int = 32) -> int:
    """⌈max(H, W) / target_px⌉: the integer average-pool factor that brings the input to at most ``target_px``."""
    return max(1, math.ceil(max(spec.height, spec.width) / target_px))


def _pooled(spec: InputSpec, factor: int) -> InputSpec:
    return dataclasses.replace(spec, height=spec.height // factor, width=spec.width // factor)


def fixed_feature_count(spec: InputSpec, pre_pool: int = 1) -> int:
    """Scattering coefficients per record (what a ScatterNet student keeps for every private record), after an optional
    average pool by ``pre_pool``."""
    spec = _pooled(spec, pre_pool)
    J = _scales(spec)
    return ScatterNet.channels_per_input(J) * spec.channels * -(-spec.height // 2**J) * -(-spec.width // 2**J)  # ⌈·⌉: as subsampled


def _scales(spec: InputSpec) -> int:
    """J = 2 (the paper's) from 16 px up; J = 1 below, where a 2^J subsampling would leave almost nothing."""
    return 2 if min(spec.height, spec.width) >= 16 else 1


class PooledScatter(nn.Module):
    """ScatterNet coefficients average-pooled to pool×pool per channel, square-rooted: g(x) ≥ 0, computed per record."""

    def __init__(self, spec: InputSpec, pool: int) -> None:
        super().__init__()
        self.scatter = ScatterNet(spec.channels, J=_scales(spec))
        with torch.no_grad():
            h, w = self.scatter(torch.zeros(1, *spec.shape)).shape[2:]
        # a fixed average pool (legacy ONNX export has no adaptive pooling for sizes that do not divide)
        self.pool = min(pool, h, w)
        self.stride = (h // self.pool, w // self.pool)
        self.kernel = (h - (self.pool - 1) * self.stride[0], w - (self.pool - 1) * self.stride[1])
        self.out_features = self.scatter.out_channels * self.pool * self.pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.avg_pool2d(self.scatter(x), self.kernel, self.stride)
        return torch.sqrt(pooled.flatten(1).clamp(min=0.0))


class PrototypeStudent(nn.Module):
    """The AdLM student: ψ = (w ⊙ g)/‖w ⊙ g‖₁ and logits_k = ψ·μ_k − ½‖μ_k‖², i.e. the nearest prototype μ_k
    (``mechanisms/adlm.py``). ``relevance`` (w) and the prototypes are set by the method from its noisy releases."""

    def __init__(self, spec: InputSpec, pool: int = 3) -> None:
        super().__init__()
        self.fixed_features = PooledScatter(spec, pool)
        d = self.fixed_features.out_features
        self.register_buffer("relevance", torch.ones(d))
        self.head = nn.Linear(d, spec.num_classes)

    @staticmethod
    def normalise(g: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """L1-normalised weighted features; the +1e-12 keeps an all-zero record at ‖ψ‖₁ = 1 (uniform), never 0/0. The
        mechanism calls it in float64, and the (1 + 1e-9) keeps ‖ψ‖₁ ≤ 1 despite rounding: the sensitivity bound is exact."""
        v = g * weights + 1e-12
        return v / (v.sum(1, keepdim=True) * (1 + 1e-9))

    def set_prototypes(self, prototypes: torch.Tensor) -> None:
        with torch.no_grad():
            self.head.weight.copy_(prototypes)
            self.head.bias.copy_(-0.5 * (prototypes ** 2).sum(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.normalise(self.fixed_features(x), self.relevance))
