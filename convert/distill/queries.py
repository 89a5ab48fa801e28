"""What DPDFD asks the teacher: draws from the generator and the data-independent prior, and the choice of source
images between releases. Post-processing: the choice depends on the student (trained on released rows only), the
prior and public images, never on a teacher answer."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .config import DpdfdConfig
from .models import StudentModel, batched


def uncertain_sources(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The k candidates the student is least sure about (highest predictive entropy): uncertainty sampling."""
    p = F.softmax(logits.float(), 1)
    return (-(p * p.clamp_min(1e-12).log()).sum(1)).argsort(descending=True)[:k]


class QueryDraws:
    """Fresh query inputs from the prior and/or a learned generator, from the run's query stream ``rng``."""

    def __init__(self, cfg: DpdfdConfig, prior: Optional[torch.nn.Module], generator: Optional[torch.nn.Module],
                 student: StudentModel, rng: torch.Generator, num_classes: int, chunk: int, device: str) -> None:
        self.cfg, self.prior, self.generator, self.student = cfg, prior, generator, student
        self.rng, self.num_classes, self.chunk, self.device = rng, num_classes, chunk, device
        self.active_sources: Optional[torch.Tensor] = None  # the source images this release queries (None: all of them)

    def sample(self, n: int, nz: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.randn(n, nz or self.generator.nz, generator=self.rng).to(self.device)
        labels = (torch.arange(n) % self.num_classes)[torch.randperm(n, generator=self.rng)].to(self.device)
        return z, labels

    def generate(self, z, labels):
        return self.generator(z, labels if self.generator.num_classes else None)

    @torch.no_grad()
    def select_balanced(self, logits: torch.Tensor, n: int) -> torch.Tensor:
        """Indices of n inputs given the student's logits on them, n/K per student-predicted class, most confident
        first (post-processing)."""
        probs = F.softmax(logits, 1)
        conf, cls = probs.max(1)
        per = -(-n // self.num_classes)
        keep = []
        for c in range(self.num_classes):
            idx = (cls == c).nonzero().squeeze(1)
            keep.append(idx[conf[idx].argsort(descending=True)[:per]])
        keep = torch.cat(keep)
        if len(keep) < n:  # rare classes ran out: fill with the most confident of the rest
            rest = torch.ones(len(logits), dtype=torch.bool)
            rest[keep] = False
            others = rest.nonzero().squeeze(1)
            keep = torch.cat([keep, others[conf[others].argsort(descending=True)[: n - len(keep)]]])
        return keep[:n]

    @torch.no_grad()
    def with_sources(self, n: int, pool: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """(n inputs, (n, 2) indices of the public images each is made of, −1 where none: generated or prior inputs).
        ``pool`` > 1: the prior's share is a class-balanced pick out of ``pool`` times as many."""
        n_prior = n if self.generator is None else (0 if self.prior is None else int(round(n * self.cfg.prior_fraction)))
        parts, sources = [], []
        if n_prior:
            z, _ = self.sample(n_prior * pool, self.prior.nz)
            xp = batched(self.prior, z, self.chunk)
            src = self.prior.sources(z) if hasattr(self.prior, "sources") else torch.full((len(z), 2), -1, dtype=torch.long)
            if pool > 1:
                self.student.module.eval()
                keep = self.select_balanced(batched(self.student, xp, self.chunk), n_prior)
                xp, src = xp[keep], src[keep]
            parts.append(xp)
            sources.append(src.cpu())
        if n - n_prior:
            z, labels = self.sample(n - n_prior)
            self.generator.eval()
            parts.append(batched(lambda i: self.generate(z[i], labels[i]), torch.arange(n - n_prior), 1024))
            sources.append(torch.full((n - n_prior, 2), -1, dtype=torch.long))
            self.generator.train()
        return torch.cat(parts), torch.cat(sources)

    def source_z(self, n: int) -> torch.Tensor:
        """n draws of the prior's z; with ``active_sources``, views of those source images only (the first coordinate
        of z picks the image, so it is set to land on an active one: base_index(z) is the same whatever is active)."""
        z, _ = self.sample(n, self.prior.nz)
        if self.active_sources is None:
            return z
        pick = self.active_sources[torch.randint(len(self.active_sources), (n,), generator=self.rng)]
        u = (pick.double() + 0.05 + 0.9 * torch.rand(n, generator=self.rng, dtype=torch.float64)) / self.prior.num_bases
        z[:, 0] = torch.special.ndtri(u).float().to(z.device)
        return z

    @torch.no_grad()
    def choose_sources(self, release: int, queried: torch.Tensor) -> None:
        """Before release ``release`` (1-based): the source images it queries, ``new_sources_per_release`` of the ones
        no release queried yet (``queried``: those that were), those the student is least sure about."""
        k = self.cfg.new_sources_per_release
        if not k or self.cfg.student_data != "sources":
            return
        fresh = torch.ones(self.prior.num_bases, dtype=torch.bool)
        fresh[queried] = False
        candidates = fresh.nonzero().squeeze(1)
        if release == 1 or not len(queried):
            chosen = candidates[torch.randperm(len(candidates), generator=self.rng)[:k]]
        else:
            self.student.module.eval()
            logits = batched(self.student, self.prior.base_images(candidates), self.chunk).cpu()
            chosen = candidates[uncertain_sources(logits, k)]
        self.active_sources = chosen.sort().values
