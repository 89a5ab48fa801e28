"""DPDFD's generator step ("Differentially Private Data-Free Distillation", Algorithm 1 lines 13–14): the student,
trained on released rows only, is a fixed discriminator (post-processing)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .config import DpdfdConfig
from .models import nhwc
from .progress import Progress


def train_generator(generator: torch.nn.Module, opt: torch.optim.Optimizer, student: torch.nn.Module, sample: Callable,
                    cfg: DpdfdConfig, progress: Progress, round_name: str) -> float:
    """L_G: CE on the student's answer (its argmax for an unconditional generator), class balance Σ p̄ log p̄ and the
    feature-activation norm; returns the mean loss."""
    student.eval()
    for p in student.parameters():
        p.requires_grad_(False)
    total = 0.0
    progress.phase(f"{round_name}: generator", cfg.generator_steps, "steps")
    try:
        for _ in range(cfg.generator_steps):
            z, labels = sample(cfg.gen_batch)
            x = generator(z, labels if generator.num_classes else None)
            feats = student.forward_features(nhwc(x))
            s = student.forward_head(feats)
            target = labels if generator.num_classes else s.argmax(1)
            p_mean = F.softmax(s, 1).mean(0)
            loss = cfg.loss_ce * F.cross_entropy(s, target)
            loss = loss + cfg.loss_balance * (p_mean * torch.log(p_mean + 1e-8)).sum()
            loss = loss - cfg.loss_activation * feats.abs().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item()
            progress.advance(1)
    finally:
        for p in student.parameters():
            p.requires_grad_(True)
    return total / max(cfg.generator_steps, 1)
