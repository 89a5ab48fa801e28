"""DPDFD's pre-noise rows: the per-sample gradient of L_T with respect to the student's logits, in closed form.

This is where a teacher answer becomes a row of the release ("Differentially Private Data-Free Distillation",
Algorithm 1 line 8); ``gaussian_release.py`` normalises and noises the rows. Nothing here keeps a teacher answer.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from dpconvert.registry import Registry

# L_T: closed-form per-sample gradient ∂L_T/∂s (Algorithm 1's L_T), by name.
DISTILL_LOSSES: Registry[Callable] = Registry("distillation loss", param="distill_loss")


@DISTILL_LOSSES.register("ce")
def _ce_gradient(student_logits, teacher_logits, cfg):
    """L_T = CE(s, argmax t), the paper's choice: the row says only which class the teacher picked."""
    return F.softmax(student_logits, dim=1) - F.one_hot(teacher_logits.argmax(1), student_logits.shape[1]).float()


@DISTILL_LOSSES.register("kd")
def _kd_gradient(student_logits, teacher_logits, cfg):
    """L_T = τ²·KL(softmax(t/τ) ‖ softmax(s/τ)); gradient τ·(softmax(s/τ) − softmax(t/τ))."""
    tau = cfg.kd_temperature
    return tau * (F.softmax(student_logits / tau, 1) - F.softmax(teacher_logits / tau, 1))


@DISTILL_LOSSES.register("logits")
def _logit_gradient(student_logits, teacher_logits, cfg):
    """L_T = ½‖(s − s̄) − (t − t̄)‖² (logit matching, Ba & Caruana 2014; the τ→∞ limit of KD).

    Its gradient is the centred difference s − t. At s = 0 (a zero-initialised
    student head, ``zero_head``) the normalised row is the direction of the
    teacher's centred logits: the teacher's whole ranking of the classes, where
    CE keeps only its top class. Same norm C, same noise, same ε.
    """
    d = student_logits - teacher_logits
    return d - d.mean(1, keepdim=True)


def per_sample_output_gradient(student_logits: torch.Tensor, teacher_logits: torch.Tensor, cfg) -> torch.Tensor:
    """∂L_T/∂s for each row, closed form: the gradient w.r.t. the student logits only, no per-parameter gradients.
    ``cfg``: the engine's ``DpdfdConfig`` (``distill_loss``, ``kd_temperature``)."""
    return DISTILL_LOSSES.get(cfg.distill_loss)(student_logits, teacher_logits, cfg)


def label_log_likelihood(student_logits: torch.Tensor, g_noisy: torch.Tensor, mech) -> torch.Tensor:
    """log P(g̃ | teacher label c), up to a constant, for one noisy CE release (post-processing).

    For L_T = CE(s, argmax t) the normalised row is ḡ_c = C·(p_s − e_c)/‖p_s − e_c‖
    for the (unknown) teacher label c, and g̃ = ḡ_c + N(0, σ²C²I). Every ḡ_c has
    norm C, so log P(g̃ | c) = ⟨g̃, ḡ_c⟩ / (σ²C²) + const. Adding a log-prior and a
    softmax gives the posterior over the teacher label (ALIBI-style decoding,
    Malek et al. 2021). At σ = 0 the likelihood is made a hard one-hot label.
    """
    p = F.softmax(student_logits, dim=1)
    k = p.shape[1]
    cands = p[:, None, :] - torch.eye(k, device=p.device)[None]  # (B, c, K): p_s − e_c
    cands = mech.normalise(cands.reshape(-1, k)).reshape(-1, k, k)
    score = torch.einsum("bk,bck->bc", g_noisy, cands)
    if mech.sigma == 0:
        return torch.where(F.one_hot(score.argmax(1), k).bool(), 0.0, -1e4)
    return score / (mech.sigma * mech.clip) ** 2
