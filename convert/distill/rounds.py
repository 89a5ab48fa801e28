"""The rounds of a DPDFD run: each calls the privacy kernel's release (``mechanisms/dpdfd.Dpdfd.release``), then
post-processes what it released — the student learns the released targets, the generator learns against the student,
the logit adjustment evens out the query set's class mix. Nothing here calls the teacher or draws DP noise: it sees
released targets only (``tests/test_per_answer.py`` runs it with a teacher that raises outside the release).
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Optional

import torch

from dpconvert.profiling import phase

from .config import DpdfdConfig, RoundInfo
from .generator_training import train_generator
from .models import batched, joined
from .source_targets import DENOISERS, SourceTargets, shrink_towards
from .student_training import StudentTrainer, adjust_for_query_prior


def student_samples(cfg: DpdfdConfig, rows_released: int) -> int:
    """Student samples in one round: a fixed number (sources), or every row released so far, each epoch (rows)."""
    return cfg.student_samples if cfg.student_data == "sources" else cfg.student_epochs * rows_released


def planned_student_samples(cfg: DpdfdConfig) -> int:
    """Student samples over the whole run: round r follows r releases of B rows."""
    first = student_samples(cfg, cfg.releases * cfg.batch_size) if cfg.shrink_to_student and cfg.student_data == "sources" else 0
    return first + sum(student_samples(cfg, r * cfg.batch_size) for r in range(1, cfg.releases + 1))


class DpdfdRounds:
    """T rounds over the kernel's engine ``job``: release, then train on everything released so far.

    Keeps what was released: every (row, target) pair (``student_data`` rows; a row is the prior's z when the engine
    keeps z) or the running mean target of each source image (``student_data`` sources)."""

    def __init__(self, job) -> None:
        self.job, self.cfg = job, job.cfg
        self.trainer = self._fresh_trainer()
        self.opt_g = torch.optim.Adam(job.generator.parameters(), lr=job.cfg.generator_lr) if job.generator is not None else None
        self.buffer_x: list[torch.Tensor] = []
        self.buffer_y: list[torch.Tensor] = []
        self.source_targets: Optional[SourceTargets] = None
        self.query_prior_shift: Optional[torch.Tensor] = None  # the logit adjustment applied after the last round
        self.round = 1
        # the student's initial weights, trained again from after the shrink (cfg.shrink_to_student)
        self.initial_student = copy.deepcopy(job.model.module.state_dict()) if job.cfg.shrink_to_student else None

    @property
    def round_name(self) -> str:
        return f"round {self.round}/{self.cfg.releases}"

    # ------------------------------------------------------------ what was released
    def keep(self, rows: torch.Tensor, targets: torch.Tensor) -> None:
        """Buffer one release's (rows, targets), or fold its targets into the running mean per source image."""
        if self.cfg.student_data == "sources":
            if self.source_targets is None:
                self.source_targets = SourceTargets(self.job.prior.num_bases, self.job.num_classes)
            self.source_targets.add(self.job.prior.base_index(rows).cpu(), targets.cpu())
        else:
            self.buffer_x.append(rows.detach())
            self.buffer_y.append(targets.detach())

    @torch.no_grad()
    def released_inputs(self, release: int = 0) -> torch.Tensor:
        """The inputs of one release, in release order (rendered from z when the engine keeps z)."""
        return batched(self.job.render, self.buffer_x[release], self.job.chunk)

    def queried_sources(self) -> torch.Tensor:
        """The source images queried so far (per-image targets), for the next release's choice of new ones."""
        return self.source_targets.active() if self.source_targets is not None else torch.empty(0, dtype=torch.long)

    def denoised_source_targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices of the queried source images, their denoised targets); the noise variance of each mean follows
        from σ, C and the step γ (the release's, from the config) and its count."""
        idx = self.source_targets.active()
        return idx, DENOISERS.get(self.cfg.denoise)(self.source_targets.means(), self._noise_var(idx), self.cfg.seed)

    def _noise_var(self, idx: torch.Tensor) -> torch.Tensor:
        """Per-entry noise variance of each queried image's mean target: (γσC)² over its count of released rows."""
        cfg = self.cfg
        return cfg.target_noise_var() / self.source_targets.counts[idx].double()

    # ------------------------------------------------------------ training on it
    def train_student(self, epochs: Optional[int] = None) -> float:
        """Alg. 1 lines 11–12 on every released pair, or on the released targets per source image."""
        job = self.job
        if self.cfg.student_data == "sources":
            idx, targets = self.denoised_source_targets()
            if self.initial_student is not None and self.round == self.cfg.releases:
                targets = self._shrunk_to_first_student(idx, targets)
            return self.trainer.on_sources(idx, targets.to(job.device), job.prior.augment, job.prior.nz, self.round_name)
        x, y = joined(self.buffer_x), joined(self.buffer_y)
        loss = self.trainer.on_rows(x, y, job.render, self.round_name, epochs)
        if self.round == self.cfg.releases and self.trainer.head_refit_applies(len(x)):
            self.trainer.refit_head(x, y, job.render, self.round_name)
        return loss

    def _shrunk_to_first_student(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """cfg.shrink_to_student: a first student on the targets (with the logit adjustment, as the final one gets),
        the targets shrunk towards its answers on the images, and the student reset to its initial weights and a
        fresh optimiser for the second training (source_targets.shrink_towards)."""
        job, cfg = self.job, self.cfg
        self.trainer.on_sources(idx, targets.to(job.device), job.prior.augment, job.prior.nz, f"{self.round_name} (first student)")
        if cfg.logit_adjust:
            self.adjust_for_query_prior()
        job.model.module.eval()
        with torch.no_grad():
            logits = batched(job.model, job.prior.base_images(idx), job.chunk).float().cpu()
        job.model.module.load_state_dict(self.initial_student)
        self.trainer = self._fresh_trainer()
        return shrink_towards(targets, self._noise_var(idx), logits, cfg.target_step)

    def _fresh_trainer(self) -> StudentTrainer:
        """The student's trainer with a fresh optimiser and schedule (at the start, and after the first student)."""
        job = self.job
        return StudentTrainer(job.cfg, job.model, job.rng, job.world, job.progress)

    def train_generator(self) -> float:
        job = self.job
        return train_generator(job.generator, self.opt_g, job.student, job.queries.sample, self.cfg, job.progress, self.round_name)

    def _query_sample(self, n: int) -> torch.Tensor:
        """Up to n of the released queries, evenly spaced, as student logits (for the logit adjustment)."""
        job = self.job
        if self.source_targets is not None:  # views of source images: the queried images themselves
            queried = self.source_targets.active()
            x = job.prior.base_images(queried[torch.linspace(0, len(queried) - 1, min(n, len(queried))).long()])
            return batched(job.model, x, job.chunk)
        # evenly spaced over the whole buffer (every release and source), gathered without concatenating it
        ends = torch.tensor([len(b) for b in self.buffer_x]).cumsum(0)
        idx = torch.linspace(0, int(ends[-1]) - 1, min(n, int(ends[-1]))).long()
        x = torch.cat([b[idx[(idx >= end - len(b)) & (idx < end)] - (end - len(b))] for b, end in zip(self.buffer_x, ends)])
        return job.student_on(x)

    def adjust_for_query_prior(self, n: int = 20_000) -> torch.Tensor:
        return adjust_for_query_prior(self.job.model, lambda: self._query_sample(n))

    # ------------------------------------------------------------ the rounds
    def run(self, on_round: Optional[Callable[[RoundInfo], None]] = None, on_progress: Optional[Callable[[dict], None]] = None) -> "DpdfdRounds":
        """Every round, in order; returns these rounds (what they released and trained on)."""
        job, cfg = self.job, self.cfg
        job.progress.callback = on_progress
        for r in range(1, cfg.releases + 1):
            t0 = time.perf_counter()
            self.round = r
            job.queries.choose_sources(r, self.queried_sources())
            rows, targets, times = job.release(r)
            self.keep(rows, targets)
            t1 = time.perf_counter()
            with phase("student training", items=student_samples(cfg, sum(len(b) for b in self.buffer_x))):
                ls = self.train_student()
            times["student"] += time.perf_counter() - t1
            lg = 0.0
            if r < cfg.releases and cfg.generator_steps and job.generator is not None:
                t1 = time.perf_counter()
                with phase("generator training", items=cfg.generator_steps * cfg.gen_batch):
                    lg = self.train_generator()
                times["generator"] += time.perf_counter() - t1
            if r == cfg.releases and cfg.logit_adjust:
                self.query_prior_shift = self.adjust_for_query_prior()  # the verdict looks at what came before it
            if on_round:
                on_round(RoundInfo(r, job.releases_done(), ls, lg, time.perf_counter() - t0, times))
        return self
