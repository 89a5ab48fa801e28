"""The ridge head's penalty by Stein's unbiased risk estimate (distill/ridge.py), checked against direct matrix algebra
and against the truth on simulated regressions with known noise."""

import torch

from dpconvert.distill.ridge import PENALTY_GRID, sure_ridge


def _problem(seed: int, n: int = 300, p: int = 40, k: int = 6, signal: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, p, generator=g, dtype=torch.float64) @ torch.diag(torch.logspace(0, -1, p, dtype=torch.float64))
    x[:, 7] = 0.0  # a unit dead on every row: weight 0, as in the pseudo-inverse
    beta = signal * torch.randn(p, k, generator=g, dtype=torch.float64)
    return x, x @ beta, g


def _stats(x, y):
    return x.T @ x, x.T @ y, float(y.pow(2).sum())


def test_without_noise_it_is_the_minimum_norm_least_squares_fit():
    x, clean, g = _problem(0)
    y = clean + 0.1 * torch.randn(clean.shape, generator=g, dtype=torch.float64)
    fit = sure_ridge(*_stats(x, y), len(x), noise_trace=0.0)
    assert fit.penalty == 0.0
    assert torch.allclose(fit.weights, torch.linalg.pinv(x) @ y, atol=1e-8)
    assert fit.weights[7].abs().max() < 1e-12
    assert abs(fit.dof - 39) < 1e-6  # the rank


def test_the_pick_is_the_grid_minimum_of_the_risk_estimate_written_out_directly():
    """Every candidate's ridge fit by a direct solve, its hat matrix S = X(XᵀX + λI)⁻¹Xᵀ built explicitly, and
    ‖Y − SY‖² − n·tr Σ + 2·tr S·tr Σ: the function's penalty, weights, dof and risk are that minimum's."""
    x, clean, g = _problem(1)
    noise_var, k = 0.5, clean.shape[1]
    y = clean + noise_var**0.5 * torch.randn(clean.shape, generator=g, dtype=torch.float64)
    fit = sure_ridge(*_stats(x, y), len(x), noise_trace=noise_var * k)
    live = x[:, [i for i in range(x.shape[1]) if i != 7]]  # the dead unit has no eigen-direction: leave it out here
    gram = live.T @ live
    scale = torch.linalg.eigvalsh(gram).mean()
    best = None
    for lam in [0.0] + (PENALTY_GRID * scale).tolist():
        hat = live @ torch.linalg.solve(gram + lam * torch.eye(len(gram), dtype=gram.dtype), live.T)
        risk = float((y - hat @ y).pow(2).sum() - len(x) * noise_var * k + 2 * torch.trace(hat) * noise_var * k)
        if best is None or risk < best[0]:
            best = (risk, lam, hat)
    risk, lam, hat = best
    assert fit.penalty > 0 and abs(fit.penalty - lam) <= 1e-9 * lam
    assert abs(fit.risk - risk) <= 1e-6 * abs(risk)
    assert abs(fit.dof - float(torch.trace(hat))) < 1e-6
    assert torch.allclose(x @ fit.weights, hat @ y, atol=1e-8)


def test_it_beats_least_squares_by_more_the_more_the_noise_swamps_the_signal():
    """Simulated rows with a known clean target and noise of variance 1: over 40 noise draws the chosen ridge fit is
    closer to the clean target than least squares (whose error is rank·tr Σ ≈ 234 here), by far where the signal is
    weak and a little where it is strong, and its penalty falls as the signal grows."""
    means = {}
    for signal in (0.05, 1.0):
        x, clean, g = _problem(2, signal=signal)
        ridge_err = ls_err = 0.0
        penalties = []
        for _ in range(40):
            y = clean + torch.randn(clean.shape, generator=g, dtype=torch.float64)
            fit = sure_ridge(*_stats(x, y), len(x), noise_trace=clean.shape[1])
            ridge_err += float((x @ fit.weights - clean).pow(2).sum())
            ls_err += float((x @ torch.linalg.pinv(x) @ y - clean).pow(2).sum())
            penalties.append(fit.penalty)
        means[signal] = (ridge_err / ls_err, sorted(penalties)[20])
    assert means[0.05][0] < 0.2 and means[1.0][0] < 0.97
    assert means[0.05][1] > 100 * means[1.0][1]
