"""Training DPDFD's student on released rows only ("Differentially Private Data-Free Distillation", Algorithm 1
lines 11–12): replaying every released (x, y_s) pair, or fresh views of source images towards their averaged,
denoised targets; and the logit adjustment after training. All of it is post-processing of the release."""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from dpconvert.distributed import World

from .config import DpdfdConfig
from .models import StudentModel, classifier
from .progress import Progress
from .ridge import RidgeFit, sure_ridge


HEAD_REFIT_MAX_NOISE = 1.0  # the fitted head's own noise at most the signal's power (head_refit_applies)


def head_refit_applies(cfg: DpdfdConfig, head: torch.nn.Linear, rows: int) -> bool:
    """Whether the refitted head (:meth:`StudentTrainer.refit_head`) replaces the trained one after training on
    ``rows`` released rows: the engine asks for it (``head_refit``), the rows carry the centred logit target, and the
    least-squares head's own noise, (γσC)²·(D+1)/n per output, is at most HEAD_REFIT_MAX_NOISE of the clean target's
    power per output, (γC)²/K (D features, K classes). Where rows are few for the features (a 224-px teacher's
    16 384 rows at K = 1 000) the optimiser's head is left as it is."""
    if not cfg.head_refit or cfg.student_target != "centred" or not rows:
        return False
    return cfg.sigma ** 2 * head.out_features * (head.in_features + 1) / rows <= HEAD_REFIT_MAX_NOISE


def cosine_lr(base: float, step: int, steps: int) -> float:
    return base * 0.5 * (1 + math.cos(math.pi * step / steps))


class StudentTrainer:
    def __init__(self, cfg: DpdfdConfig, student: StudentModel, rng: torch.Generator, world: World, progress: Progress) -> None:
        self.cfg, self.student, self.rng, self.world, self.progress = cfg, student, rng, world, progress
        self.opt = torch.optim.Adam(student.module.parameters(), lr=cfg.student_lr)

    def _step(self, loss: torch.Tensor, scale: float) -> float:
        self.opt.zero_grad(set_to_none=True)
        (loss * scale).backward()
        self.opt.step()
        return loss.item()

    def _set_lr(self, lr: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = lr

    def on_sources(self, idx: torch.Tensor, targets: torch.Tensor, views: Callable, nz: int, round_name: str) -> float:
        """The student on fresh views of each queried image (``views(index, z)``), towards its denoised target."""
        cfg = self.cfg
        epochs = max(1, round(cfg.student_samples / max(len(idx), 1)))
        steps, n, total = epochs * -(-len(idx) // cfg.source_minibatch), 0, 0.0
        self.progress.phase(f"{round_name}: student", epochs * len(idx), "views")
        self.student.module.train()
        for _ in range(epochs):
            for b in torch.randperm(len(idx), generator=self.rng).split(cfg.source_minibatch):
                self._set_lr(cosine_lr(cfg.student_lr, n, steps))
                z = torch.randn(len(b), nz, generator=self.rng).to(self.student.device)  # drawn whole: every rank's stream alike
                pos, scale = self.world.part(torch.arange(len(b)))  # this rank's part of the minibatch
                if pos is None:
                    continue
                out = self.student.fit_forward(views(idx[b[pos]].to(self.student.device), z[pos]))
                loss = -(F.softmax(targets[b[pos]], 1) * F.log_softmax(out, 1)).sum(1).mean()  # soft cross-entropy to the target
                total, n = total + self._step(loss, scale), n + 1
                self.progress.advance(len(b))
            self.progress.epoch_done()
        return total / max(n, 1)

    def score_targets(self, loglik: torch.Tensor) -> torch.Tensor:
        """Unbiased label scores λ·⟨g̃, ḡ_c⟩/C² (centred): E = λ⟨ḡ_t, ḡ_c⟩/C², maximal at the teacher label (σ: the
        release's multiplier, from the engine's settings like every other number the trainer uses)."""
        sigma = self.cfg.sigma
        y = loglik * sigma**2 if sigma > 0 else (loglik == 0).float()
        y = self.cfg.score_scale * y
        return y - y.mean(1, keepdim=True)

    def _row_target(self, y: torch.Tensor) -> torch.Tensor:
        if self.cfg.student_target == "score":
            return self.score_targets(y)
        # the released y_s (Algorithm 1 line 11, L_S = ½‖s − y_s‖²) compared shift-invariantly: the noise's common shift is not fitted
        return y - y.mean(1, keepdim=True)

    def _row_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * (out - out.mean(1, keepdim=True) - self._row_target(y)).pow(2).sum(1).mean()

    def on_rows(self, x: torch.Tensor, y: torch.Tensor, render: Callable, round_name: str, epochs: Optional[int] = None) -> float:
        """Every released pair, ``epochs`` passes (x: the inputs, or the prior's z that ``render`` turns into them)."""
        cfg = self.cfg
        self.student.module.train()
        total, n = 0.0, 0
        epochs = cfg.student_epochs if epochs is None else epochs
        steps = epochs * -(-len(x) // cfg.minibatch)
        self.progress.phase(f"{round_name}: student", epochs * len(x), "rows")
        for _ in range(epochs):
            for idx, scale in self.world.minibatches(torch.randperm(len(x), generator=self.rng), cfg.minibatch):
                self._set_lr(cosine_lr(cfg.student_lr, n, steps))
                out = self.student.fit_forward(render(x[idx]))
                total, n = total + self._step(self._row_loss(out, y[idx]), scale), n + 1
                self.progress.advance(len(idx) * self.world.size)  # the whole minibatch (each rank trains on its part)
            self.progress.epoch_done()
        return total / max(n, 1)

    def head_refit_applies(self, rows: int) -> bool:
        return head_refit_applies(self.cfg, classifier(self.student.module), rows)

    @torch.no_grad()
    def refit_head(self, x: torch.Tensor, y: torch.Tensor, render: Callable, round_name: str) -> RidgeFit:
        """The classifier refitted by ridge regression on every released row, at the features the trained student
        computes in evaluation mode (as it will answer), its penalty chosen by Stein's unbiased risk estimate
        (distill/ridge.py). The rows' noise is i.i.d. Gaussian of a variance the release fixes, (γσC)² per entry, so the
        risk of each candidate head is estimated without held-out rows; λ = 0 is the least-squares head (Gauss–Markov),
        and where its variance costs more than a penalty's bias a penalty wins. The optimiser's head ends wherever its
        schedule left it, fitted to batch-statistics features. On the built-in digits teacher: least squares +0.8 points
        on the mean of six seeds, never worse; the chosen ridge +0.6 more (benchmarks/RESULTS.md, table 1).
        Post-processing of the released rows: no ε."""
        head = classifier(self.student.module)
        self.progress.phase(f"{round_name}: ridge head", len(x), "rows")
        gram, cross, target_ss = self._feature_statistics(head, x, y, render)
        noise_trace = self.cfg.target_noise_var() * (head.out_features - 1)  # the centred target: K − 1 free entries
        fit = sure_ridge(gram, cross, target_ss, len(x), noise_trace)
        w = fit.weights
        head.weight.copy_(w[:head.in_features].T.to(head.weight.dtype))
        if head.bias is not None:
            head.bias.copy_(w[head.in_features].to(head.bias.dtype))
        return fit

    def _feature_statistics(self, head: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor, render: Callable):
        """(FᵀF, FᵀT, ‖T‖²) over every row, F the head's inputs in evaluation mode (and a ones column for its bias), T
        the row targets as the student is trained on them; float64, accumulated a minibatch at a time."""
        student, feats = self.student, []
        hook = head.register_forward_hook(lambda _m, inputs, _out: feats.append(inputs[0]))
        gram = cross = None
        target_ss = 0.0
        was_training = student.module.training
        student.module.eval()
        try:
            for start in range(0, len(x), self.cfg.minibatch):
                feats.clear()
                student(render(x[start:start + self.cfg.minibatch]))
                f = feats[0].flatten(1).double()
                if head.bias is not None:
                    f = torch.cat([f, torch.ones(len(f), 1, dtype=f.dtype, device=f.device)], 1)
                t = self._row_target(y[start:start + len(f)].to(f.device).float()).double()
                gram, cross = (f.T @ f, f.T @ t) if gram is None else (gram + f.T @ f, cross + f.T @ t)
                target_ss += float(t.pow(2).sum())
                self.progress.advance(len(f))
        finally:
            hook.remove()
            student.module.train(was_training)
        return gram.cpu(), cross.cpu(), target_ss


@torch.no_grad()
def adjust_for_query_prior(student: StudentModel, query_logits: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Logit adjustment: head bias −= the student's mean logits over the released queries (``query_logits``).

    The student learns E[row | x] under the query distribution. A data-free
    prior puts most queries in one or two classes (FMNIST: sandal and bag),
    so that mean is far from zero, and under noise argmax then returns the
    query set's majority class on real inputs. Subtracting it is the logit
    adjustment for a label shift to a uniform class prior (Menon et al.
    2021). It uses only the student and the data-independent queries:
    post-processing, no ε. Returns the shift that was removed.
    """
    head = classifier(student.module)
    if head.bias is None:
        raise ValueError("logit_adjust needs a classifier with a bias")
    was_training = student.module.training
    student.module.eval()
    try:
        shift = query_logits().mean(0)
        head.bias.sub_(shift)
    finally:
        student.module.train(was_training)
    return shift
