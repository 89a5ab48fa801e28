"""DPDFD: differentially private data-free distillation ("Differentially Private Data-Free Distillation", Algorithm 1).

The only teacher information that leaves this module's release step is the
output of ``NormalisedGaussianRelease``: per-row normalised, Gaussian-noised
gradients of L_T w.r.t. the student logits. Everything after it — the student
update, replaying released (x, y_s) pairs, the generator update against the
student — is post-processing (docs/methods.md). The teacher
is only ever called forward, under ``torch.inference_mode()``.

A round = one noisy release of ``batch_size`` rows (one accountant event),
followed by ``student_epochs`` passes of the student over every pair released
so far and ``generator_steps`` generator updates with the student as a fixed
discriminator. ε depends on σ and the number of releases only; the batch size
and the replay are free for the query-level guarantee (the record-level worst
case grows with √B: the card shows it).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from dpconvert.accounting import DpdfdAccountant
from dpconvert.distributed import LOCAL, World
from dpconvert.errors import DpconvertError
from dpconvert.mechanisms.gaussian_release import NormalisedGaussianRelease
from dpconvert.mechanisms.noise import mechanism_rng
from dpconvert.mechanisms.source_targets import DENOISERS, SourceTargets
from dpconvert.profiling import phase
from dpconvert.registry import Registry


@dataclass
class DpdfdConfig:
    releases: int = 8  # T: noisy releases (accountant events)
    batch_size: int = 4096  # B: rows per release
    sigma: float = 0.0  # noise multiplier (std σ·C per entry)
    clip: float = 1.0  # C: row norm after normalisation
    target_step: float = 5.0  # γ in y_s = s − γ·g̃ (Algorithm 1 line 10)
    # L_T (DISTILL_LOSSES): "logits" (centred logit matching; default, chosen by benchmark: benchmarks/RESULTS.md, table 1),
    # "ce" on the teacher argmax (the paper's choice) or "kd" (soft probabilities at kd_temperature)
    distill_loss: str = "logits"
    # None → "score" for ce, "centred" otherwise. "score": MSE to decoded label scores (ce only); "paper": MSE to y_s;
    # "centred": the paper's y_s compared shift-invariantly
    student_target: Optional[str] = None
    zero_head: Optional[bool] = None  # zero the student's classifier first, so the first release is taken at s = 0 (None → not ce)
    score_scale: float = 5.0  # λ: logit gap the clean score target corresponds to
    # logit adjustment after training (post-processing): subtract the student's mean logits over the released queries
    # from its head bias, so the query set's class mix is not kept as a prior on real inputs (Menon et al. 2021)
    logit_adjust: bool = False
    kd_temperature: float = 4.0
    student_epochs: int = 4  # replay passes over the whole buffer after each release
    student_lr: float = 1e-3
    lr_schedule: str = "constant"  # "constant" or "cosine": decay to 0 over each replay (averages the noisy targets' pull)
    minibatch: int = 256
    generator_steps: int = 100  # generator updates per round (student as fixed discriminator)
    generator_lr: float = 1e-3
    gen_batch: int = 256
    loss_ce: float = 1.0  # L_G: CE(student(G(z,c)), c) (argmax of the student for unconditional G)
    loss_balance: float = 1.0  # α: Σ p̄ log p̄ (class balance)
    loss_activation: float = 0.1  # β: −‖f_s(x)‖ (activation term)
    prior_fraction: float = 0.5  # share of each release drawn from the data-independent prior (generators/random_fields.py)
    prior_pool: int = 1  # after the first release, draw pool×n prior samples and keep a class-balanced, student-confident n
    # what the student learns from: "rows" replays every released (x, y_s) pair; "sources" (queries that are views of
    # source images, e.g. public images) averages the released targets per source image, denoises them
    # (source_targets.DENOISERS) and trains on fresh views of the images (mechanisms/source_targets.py)
    student_data: str = "rows"
    denoise: str = "bayes"
    student_samples: int = 400_000  # "sources": views the student trains on in all (epochs over the images follow from it)
    source_minibatch: int = 256  # "sources": images per student step
    source_loss: str = "soft_ce"  # "sources": "soft_ce" (cross-entropy to softmax of the target) or "centred" (as the rows)
    amp: Optional[str] = None  # "bf16": teacher and student forward under bf16 autocast; the release stays fp32
    # "sources" with several releases: each release queries views of this many source images no release queried yet,
    # those the student trained on the earlier releases is least sure about (uncertainty sampling: post-processing, and
    # per-answer accounting keeps the ε of one release); 0: every release queries views of every source image. Measured
    # on Fashion-MNIST (benchmarks/RESULTS.md, table 12): 4 × 625 of 20 000 prior images 61.3 % against 56.0 % for
    # today's default (seed 0); picking them class-balanced by the student's predictions lost (52.7 %) and was removed
    new_sources_per_release: int = 0
    image_buffer_bytes: int = 2**30  # keep released inputs as images up to this size, else as the prior's z (re-rendered)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}")
        if self.student_data not in ("rows", "sources"):
            raise ValueError(f"student_data must be 'rows' or 'sources', got {self.student_data!r}")
        if self.amp not in (None, "bf16"):
            raise ValueError(f"amp must be None or 'bf16', got {self.amp!r}")
        if self.source_loss not in ("soft_ce", "centred"):
            raise ValueError(f"source_loss must be 'soft_ce' or 'centred', got {self.source_loss!r}")
        if self.student_target is None:
            self.student_target = "score" if self.distill_loss == "ce" else "centred"
        if self.zero_head is None:
            self.zero_head = self.distill_loss != "ce"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RoundInfo:
    round: int
    releases: int
    student_loss: float
    generator_loss: float
    seconds: float
    times: dict


# L_T: closed-form per-sample gradient ∂L_T/∂s (Algorithm 1's L_T), by name.
DISTILL_LOSSES: Registry[Callable] = Registry("distillation loss")


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


def per_sample_output_gradient(student_logits: torch.Tensor, teacher_logits: torch.Tensor, cfg: DpdfdConfig) -> torch.Tensor:
    """∂L_T/∂s for each row, closed form: the gradient w.r.t. the student logits only, no per-parameter gradients."""
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


def classifier(student: torch.nn.Module) -> torch.nn.Linear:
    """The student's last linear layer (timm's ``get_classifier``, or the last Linear of its ``head``)."""
    head = student.get_classifier() if hasattr(student, "get_classifier") else student.head
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise DpconvertError(f"the student's classifier ({type(head).__name__}) has no Linear layer; choose another `student`")
    return linears[-1]


def student_classes(student: torch.nn.Module) -> int:
    return int(classifier(student).out_features)


def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
    """The buffer as one tensor; a single release is used as is (no copy of ~300 MB at B=100k on 28×28)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _flat_inputs(x: torch.Tensor, amp: Optional[str] = None) -> torch.Tensor:
    """Rows as the teacher sees them, flattened; + 0.0 maps −0.0 to 0.0 (the same input to the teacher). Under bf16
    autocast the teacher computes on bf16-rounded inputs, so two float32 inputs that round alike are one input to it:
    they are compared after the same rounding."""
    flat = x.reshape(len(x), -1).float()
    if amp == "bf16":
        flat = flat.to(torch.bfloat16).float()
    return flat + 0.0


def first_occurrences(x: torch.Tensor) -> torch.Tensor:
    """Indices of the first copy of each distinct row (sample) of x, in their original order.

    Rows are compared by value (−0.0 equals 0.0). A 64-bit hash of each row's bits groups candidate copies in one 1-D
    sort; equal rows always share a hash, and only rows whose hash is shared are compared exactly, so the answer is
    the exact one (a hash collision between different rows costs time, never a missed copy). Sorting whole rows
    lexicographically (torch.unique(dim=0)) took ~2 s for a release of 300 000 8×8 inputs.
    """
    flat = _flat_inputs(x)
    return first_by_hash(_row_hash(flat), lambda idx: flat[idx])


def first_by_hash(h: torch.Tensor, rows: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``first_occurrences`` given each row's hash and a way to get the rows at some indices (flattened, −0.0 as 0.0)."""
    _, inverse, counts = torch.unique(h, return_inverse=True, return_counts=True)
    keep = torch.ones(len(h), dtype=torch.bool, device=h.device)
    shared = counts[inverse] > 1
    if shared.any():  # exact comparison among rows whose hash is shared (copies, or rare collisions)
        idx = shared.nonzero().squeeze(1)
        _, inv = torch.unique(rows(idx), dim=0, return_inverse=True)
        first = torch.full((int(inv.max()) + 1,), len(h), dtype=torch.long, device=h.device)
        first = first.scatter_reduce(0, inv, idx, "amin")
        keep[idx] = False
        keep[first] = True
    return keep.nonzero().squeeze(1)


_HASH_WEIGHTS: dict = {}


def _row_hash(flat: torch.Tensor) -> torch.Tensor:
    """A fixed random linear hash (mod 2^64) of each row's float32 bit patterns."""
    d = flat.shape[1]
    if d not in _HASH_WEIGHTS:
        g = torch.Generator().manual_seed(0x5EED)
        _HASH_WEIGHTS[d] = torch.randint(1, 2**62, (d,), generator=g, dtype=torch.int64) | 1
    w = _HASH_WEIGHTS[d].to(flat.device)
    # in chunks: the int64 copy of a whole release of 28×28 inputs would be 8 bytes per pixel (6 GB for a million)
    return torch.cat([(c.contiguous().view(torch.int32).to(torch.int64) * w).sum(1) for c in flat.split(16384)])


def nhwc(x: torch.Tensor) -> torch.Tensor:
    """Images in channels-last layout (the students run in it); other tensors as they are."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def _uncertain_sources(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The k candidates the student is least sure about (highest predictive entropy): uncertainty sampling."""
    p = F.softmax(logits.float(), 1)
    return (-(p * p.clamp_min(1e-12).log()).sum(1)).argsort(descending=True)[:k]


TEACHER_BATCH = 1024  # rows per teacher call (the teacher runs in inference mode; larger batches amortise call overhead)
INPUT_FLOATS_PER_CALL = 2**23  # and at most this many input floats per call (32 MB): 55 rows of 3×224×224


def rows_per_call(pixels: int) -> int:
    """Rows per teacher/student call for inputs of ``pixels`` values: TEACHER_BATCH for small images, fewer for large ones
    (a 1 024-row call at 3×224×224 would hold gigabytes of activations)."""
    return max(8, min(TEACHER_BATCH, INPUT_FLOATS_PER_CALL // max(pixels, 1)))


def _batched(fn: Callable, x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.cat([fn(chunk) for chunk in x.split(size)])


class Dpdfd:
    def __init__(self, teacher: Callable, student: torch.nn.Module, generator: Optional[torch.nn.Module], cfg: DpdfdConfig,
                 accountant: DpdfdAccountant, device: str = "cpu", prior: Optional[torch.nn.Module] = None,
                 noise_rng: Optional[torch.Generator] = None, world: World = LOCAL, replicated_noise: bool = False) -> None:
        """``world``: under torchrun, this rank answers and noises its shard of every release and trains the student
        with DDP (convert/distributed.py); ``replicated_noise``: every rank holds the same seeded noise stream."""
        self.teacher, self.cfg, self.world = teacher, cfg, world
        self.student = student.to(device).to(memory_format=torch.channels_last)  # NHWC: CPU convolutions ~1.5× faster
        self.generator = generator.to(device) if generator is not None else None
        self.prior = prior.to(device) if prior is not None else None
        if self.generator is None and self.prior is None:
            raise ValueError("DPDFD needs a generator, a prior, or both")
        if cfg.distill_loss != "ce" and cfg.student_target == "score":
            raise ValueError("label decoding (the score target) assumes the CE release; use student_target 'paper' or 'centred'")
        if cfg.student_data == "sources" and (generator is not None or not hasattr(prior, "base_index")):
            raise ValueError("student_data 'sources' needs queries that are views of source images (public images) and no generator")
        if cfg.zero_head:
            head = classifier(self.student)
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
        self.device = device
        # the DP noise: its own stream (convert/noise.py: secret unless seeded noise was asked for)
        self.noise_rng = noise_rng if noise_rng is not None else mechanism_rng(cfg.seed)[0]
        self.mechanism = NormalisedGaussianRelease(sigma=cfg.sigma, clip=cfg.clip, accountant=accountant, generator=self.noise_rng,
                                                   world=world, replicated_stream=replicated_noise)
        self._fit_model = world.wrap_for_training(self.student)  # the student in training steps (DDP across ranks)
        self.accountant = accountant
        self.opt_s = torch.optim.Adam(self.student.parameters(), lr=cfg.student_lr)
        self.opt_g = torch.optim.Adam(self.generator.parameters(), lr=cfg.generator_lr) if self.generator is not None else None
        self.source_rows: Optional[torch.Tensor] = None  # rows released per public source image (public-image queries)
        self._last_sources: Optional[torch.Tensor] = None
        self.source_targets: Optional[SourceTargets] = None  # student_data "sources": released targets per source image
        self.buffer_x: list[torch.Tensor] = []
        self.buffer_y: list[torch.Tensor] = []
        # hashes of every input answered so far, over all releases (sorted): a later release never asks one again, so
        # no input is answered twice in the run and the per-answer accountant's m_max is 1 (accounting/accountant.py)
        self.answered = torch.empty(0, dtype=torch.int64)
        self._pending_hashes: Optional[torch.Tensor] = None
        self.active_sources: Optional[torch.Tensor] = None  # the source images this release queries (None: all of them)
        self._round = 1  # the round in progress (progress display)
        self.rng = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.num_classes = student_classes(student)
        self.chunk = TEACHER_BATCH
        self.input_values = pixels = self.probe_inputs(1)[0].numel()  # values per input (C·H·W)
        self.chunk = rows_per_call(pixels)
        # queries that are a function of z (a prior, public-image views; no learned generator) are kept as z when the
        # inputs would not fit in image_buffer_bytes — 152 floats for a 3×224×224 random field instead of 150 528 — and
        # rendered again when the student needs them (re-rendering costs time: small releases keep their images)
        self.store_z = self.generator is None and (
            cfg.student_data == "sources" or 4 * pixels * cfg.batch_size * cfg.releases > cfg.image_buffer_bytes)

    def _render(self, rows: torch.Tensor) -> torch.Tensor:
        """Inputs from buffered rows (z of the prior, or the inputs themselves when a generator made them)."""
        return self.prior(rows) if self.store_z else rows

    @torch.no_grad()
    def released_inputs(self, release: int = 0) -> torch.Tensor:
        """The inputs of one release, in release order (rendered from z with ``store_z``)."""
        return _batched(self._render, self.buffer_x[release], self.chunk)

    def _student_on(self, rows: torch.Tensor) -> torch.Tensor:
        """Student logits (no gradient) for buffered rows, rendered and run a chunk at a time."""
        return _batched(lambda r: self._student(self._render(r)), rows, self.chunk)

    def _autocast(self):
        """bf16 autocast for forward passes when ``amp`` asks for it (tensor-core speed on GPUs); outputs are cast
        back to fp32 before anything is normalised, noised or compared, so the release is fp32 whatever the teacher ran in."""
        return torch.autocast(device_type=str(self.device).split(":")[0], dtype=torch.bfloat16, enabled=self.cfg.amp == "bf16")

    def _student(self, x: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            return self.student(nhwc(x)).float()

    def _fit_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The student's forward in a training step (through DDP across ranks, so backward averages the gradients)."""
        with self._autocast():
            return self._fit_model(nhwc(x)).float()

    # ------------------------------------------------------------ sampling
    def sample(self, n: int, nz: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.randn(n, nz or self.generator.nz, generator=self.rng).to(self.device)
        labels = (torch.arange(n) % self.num_classes)[torch.randperm(n, generator=self.rng)].to(self.device)
        return z, labels

    def _generate(self, z, labels):
        return self.generator(z, labels if self.generator.num_classes else None)

    @torch.no_grad()
    def _select_balanced(self, logits: torch.Tensor, n: int) -> torch.Tensor:
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
    def synthesise(self, n: int) -> torch.Tensor:
        """n fresh inputs (checks, progress, the parity probe): a ``prior_fraction`` share from the prior, the rest from
        the generator; no student-guided selection."""
        return self.synthesise_with_sources(n)[0]

    @torch.no_grad()
    def synthesise_with_sources(self, n: int, select: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(n inputs, (n, 2) indices of the public images each is made of, −1 where none: generated or prior inputs).
        ``select``: after the first release, the prior's share is a class-balanced pick out of ``prior_pool`` times as many."""
        n_prior = n if self.generator is None else (0 if self.prior is None else int(round(n * self.cfg.prior_fraction)))
        parts, sources = [], []
        if n_prior:
            pool = self.cfg.prior_pool if select and self.buffer_x else 1
            z, _ = self.sample(n_prior * pool, self.prior.nz)
            xp = _batched(self.prior, z, self.chunk)
            src = self.prior.sources(z) if hasattr(self.prior, "sources") else torch.full((len(z), 2), -1, dtype=torch.long)
            if pool > 1:
                self.student.eval()
                keep = self._select_balanced(_batched(self._student, xp, self.chunk), n_prior)
                xp, src = xp[keep], src[keep]
            parts.append(xp)
            sources.append(src.cpu())
        if n - n_prior:
            z, labels = self.sample(n - n_prior)
            self.generator.eval()
            parts.append(_batched(lambda i: self._generate(z[i], labels[i]), torch.arange(n - n_prior), 1024))
            sources.append(torch.full((n - n_prior, 2), -1, dtype=torch.long))
            self.generator.train()
        return torch.cat(parts), torch.cat(sources)

    @torch.no_grad()
    def probe_inputs(self, n: int) -> torch.Tensor:
        """n inputs from the query source for checks before the first release; the query stream is left as it was."""
        state = self.rng.get_state()
        try:
            return self.synthesise(n)
        finally:
            self.rng.set_state(state)

    @torch.no_grad()
    def distinct_queries(self, n: int, max_rounds: int = 20) -> torch.Tensor:
        """n pairwise-distinct inputs for one release.

        The query-level analysis (docs/privacy.md) lets one teacher answer move
        one row of the release by at most C. The same input twice in a release
        puts that answer in two rows (L2 sensitivity √2·C, and its noise would
        average away), so repeated inputs (e.g. a public image under the same
        shift and flip) are replaced by fresh draws. Continuous priors never repeat,
        and then this costs one sort and changes nothing.
        """
        x, src = self.synthesise_with_sources(n, select=True)
        for _ in range(max_rounds):
            flat = _flat_inputs(x, self.cfg.amp)
            h = _row_hash(flat)
            keep = self._fresh(h, first_by_hash(h, lambda idx: flat[idx]))
            x, src, h = x[keep], src[keep], h[keep]
            distinct = len(x)
            if len(x) >= n:
                self._last_sources, self._pending_hashes = src[:n], h[:n]
                return x[:n]
            more, more_src = self.synthesise_with_sources(n - len(x), select=True)
            x, src = torch.cat([x, more]), torch.cat([src, more_src])
        raise DpconvertError(
            f"the query source gave only {distinct} distinct inputs not answered before for a release of {n}: lower "
            f"`batch_size` or `releases`, or give more `public_data` images")

    def _fresh(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``keep`` (indices of distinct rows) without the rows whose input an earlier release already asked (by hash:
        equal inputs always share one, so no repeat is missed; a collision only costs a redraw)."""
        if not len(self.answered):
            return keep
        return keep[~torch.isin(h[keep].cpu(), self.answered)]

    def _remember_answered(self) -> None:
        """The release's inputs join the run's answered set (m_max stays 1: they were fresh by construction)."""
        h = self._pending_hashes.cpu()
        if torch.isin(h, self.answered).any() or len(torch.unique(h)) != len(h):
            raise RuntimeError("internal error: an input would be answered twice in this run; nothing was released")
        self.answered = torch.sort(torch.cat([self.answered, h])).values
        self._pending_hashes = None

    def _count_source_rows(self, src: torch.Tensor) -> None:
        """Rows released per public source image, over every release (for the per-image ε)."""
        n_sources = getattr(self.prior, "num_sources", None)
        if n_sources is None or src is None:
            return
        if self.source_rows is None:
            self.source_rows = torch.zeros(n_sources, dtype=torch.long)
        self.source_rows += torch.bincount(src[src >= 0], minlength=n_sources)

    def public_image_counts(self) -> Optional[dict]:
        """How many public images the released rows came from, and the most rows any one of them filled (m)."""
        if self.source_rows is None:
            return None
        return {"images": int(len(self.source_rows)), "images_queried": int((self.source_rows > 0).sum()),
                "max_rows_per_image": int(self.source_rows.max())}

    @torch.no_grad()
    def distinct_prior_queries(self, n: int) -> torch.Tensor:
        """The z of n pairwise-distinct prior inputs for one release; after the first release (rows mode) a
        class-balanced, student-confident n out of ``prior_pool``·n (``_select_balanced``)."""
        pool = self.cfg.prior_pool if self.buffer_x and self.cfg.student_data == "rows" else 1
        z = self.distinct_prior_draws(n * pool)
        if pool == 1:
            self._pending_hashes = self._draw_hashes
            return z
        self.student.eval()
        pick = self._select_balanced(self._student_on(z), n)
        self._pending_hashes = self._draw_hashes[pick.cpu()]
        return z[pick]

    # ------------------------------------------------------------ one round
    def release(self) -> dict:
        """Alg. 1 lines 2–10: synthesise B inputs, query the teacher, release noisy output gradients."""
        cfg, times = self.cfg, {}
        t0 = time.perf_counter()
        self._phase(f"release {self._round}/{cfg.releases}: queries", cfg.batch_size, "rows")
        with phase("queries", items=cfg.batch_size):
            rows = self.distinct_prior_queries(cfg.batch_size) if self.store_z else self.distinct_queries(cfg.batch_size)
        self._advance(cfg.batch_size)
        times["generator"] = time.perf_counter() - t0
        self._remember_answered()  # before the teacher sees them: a repeat stops the run before anything is released
        s_logits, g_noisy, times["teacher"], times["student"] = self._noisy_rows(rows)
        t0 = time.perf_counter()
        sources = self.prior.sources(rows) if self.store_z and hasattr(self.prior, "sources") else self._last_sources
        self._count_source_rows(None if sources is None else sources.cpu())
        if cfg.student_data == "sources":  # running means of the released targets per source image
            if self.source_targets is None:
                self.source_targets = SourceTargets(self.prior.num_bases, self.num_classes)
            self.source_targets.add(self.prior.base_index(rows).cpu(), s_logits.cpu() - cfg.target_step * g_noisy.cpu())
        else:
            y_s = label_log_likelihood(s_logits, g_noisy, self.mechanism) if cfg.student_target == "score" else s_logits - cfg.target_step * g_noisy
            self.buffer_x.append(rows.detach())
            self.buffer_y.append(y_s.detach())
        times["student"] += time.perf_counter() - t0
        return times

    def _noisy_rows(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float, float]:
        """(student logits, the noisy release, teacher seconds, release seconds) for one release's rows (z or inputs),
        rendered and answered a chunk at a time; under torchrun this rank answers its shard only."""
        t0 = time.perf_counter()
        mine = rows[self.world.shard(len(rows))]
        self.student.eval()
        s_parts, g_parts = [], []
        self._phase(f"release {self._round}/{self.cfg.releases}: teacher", len(mine), "rows")
        with phase("teacher forward", items=len(mine)):
            for chunk in mine.split(self.chunk):
                x = self._render(chunk)
                with torch.inference_mode(), self._autocast():
                    t_logits = self.teacher(x).to(self.device).float()
                with torch.no_grad():
                    s_logits = self._student(x)
                g_parts.append(per_sample_output_gradient(s_logits, t_logits.clone(), self.cfg))
                s_parts.append(s_logits)
                del t_logits
                self._advance(len(chunk))
        t1 = time.perf_counter()
        with phase("release", items=len(rows)):
            g_noisy = self.mechanism.release(torch.cat(g_parts), total=len(rows))
            del g_parts  # nothing un-noised from the teacher survives this function
            s_logits = self.world.gather_rows(torch.cat(s_parts), len(rows))
        return s_logits, g_noisy, t1 - t0, time.perf_counter() - t1

    @torch.no_grad()
    def distinct_prior_draws(self, n: int, max_rounds: int = 20) -> torch.Tensor:
        """``distinct_queries`` for a prior that is a function of z: the z of n pairwise-distinct inputs, checked by
        hash without keeping the inputs (a release of millions of 28×28 rows would not fit in memory as images)."""
        def flat(z):
            return _flat_inputs(self.prior(z), self.cfg.amp)

        z = self._source_z(n)
        for round_ in range(max_rounds):
            h = torch.cat([_row_hash(flat(c)) for c in z.split(self.chunk)])
            keep = self._fresh(h, first_by_hash(h, lambda idx: flat(z[idx])))
            z, h = z[keep], h[keep]
            distinct = len(z)
            if len(z) >= n:
                self._draw_hashes = h[:n]
                return z[:n]
            if round_ + 1 < max_rounds:
                z = torch.cat([z, self._source_z(n - len(z))])
        raise DpconvertError(f"the query source gave only {distinct} distinct inputs not answered before for a release of {n}: lower `batch_size` or `releases`, or give "
                             "more `public_data` images")

    def _source_z(self, n: int) -> torch.Tensor:
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
    def choose_sources(self, release: int) -> None:
        """Before release ``release`` (1-based): the source images it queries, ``new_sources_per_release`` of the ones
        no release queried yet, those the student (trained on released rows only) is least sure about."""
        k = self.cfg.new_sources_per_release
        if not k or self.cfg.student_data != "sources":
            return
        queried = self.source_targets.active() if self.source_targets is not None else torch.empty(0, dtype=torch.long)
        fresh = torch.ones(self.prior.num_bases, dtype=torch.bool)
        fresh[queried] = False
        candidates = fresh.nonzero().squeeze(1)
        if release == 1 or not len(queried):
            chosen = candidates[torch.randperm(len(candidates), generator=self.rng)[:k]]
        else:
            self.student.eval()
            logits = _batched(self._student, self.prior.base_images(candidates), self.chunk).cpu()
            chosen = candidates[_uncertain_sources(logits, k)]
        self.active_sources = chosen.sort().values

    def denoised_source_targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices of the queried source images, their denoised targets): post-processing of the released rows."""
        st, mech = self.source_targets, self.mechanism
        idx = st.active()
        noise_var = (self.cfg.target_step * mech.sigma * mech.clip) ** 2 / st.counts[idx].double()
        return idx, DENOISERS.get(self.cfg.denoise)(st.means(), noise_var, self.cfg.seed)

    def _train_on_sources(self) -> float:
        """The student on fresh views of each queried image, towards its denoised target (post-processing)."""
        cfg = self.cfg
        idx, targets = self.denoised_source_targets()
        targets = targets.to(self.device)
        epochs = max(1, round(cfg.student_samples / max(len(idx), 1)))
        steps, n, total = epochs * -(-len(idx) // cfg.source_minibatch), 0, 0.0
        self._phase(f"round {self._round}/{cfg.releases}: student", epochs * len(idx), "views")
        self.student.train()
        for _ in range(epochs):
            for b in torch.randperm(len(idx), generator=self.rng).split(cfg.source_minibatch):
                for group in self.opt_s.param_groups:
                    group["lr"] = cfg.student_lr * 0.5 * (1 + math.cos(math.pi * n / steps))
                z = torch.randn(len(b), self.prior.nz, generator=self.rng).to(self.device)  # drawn whole: every rank's stream alike
                pos, scale = self.world.part(torch.arange(len(b)))  # this rank's part of the minibatch
                if pos is None:
                    continue
                out = self._fit_forward(self.prior.augment(idx[b[pos]].to(self.device), z[pos]))
                y = targets[b[pos]]
                if cfg.source_loss == "soft_ce":
                    loss = -(F.softmax(y, 1) * F.log_softmax(out, 1)).sum(1).mean()
                else:
                    loss = 0.5 * (out - out.mean(1, keepdim=True) - (y - y.mean(1, keepdim=True))).pow(2).sum(1).mean()
                self.opt_s.zero_grad(set_to_none=True)
                (loss * scale).backward()
                self.opt_s.step()
                total, n = total + loss.item(), n + 1
                self._advance(len(b))
            self._advance(0, self._agreement_status())
        return total / max(n, 1)

    def score_targets(self, loglik: torch.Tensor) -> torch.Tensor:
        """Unbiased label scores λ·⟨g̃, ḡ_c⟩/C² (centred): E = λ⟨ḡ_t, ḡ_c⟩/C², maximal at the teacher label."""
        mech = self.mechanism
        y = loglik * mech.sigma**2 if mech.sigma > 0 else (loglik == 0).float()
        y = self.cfg.score_scale * y
        return y - y.mean(1, keepdim=True)

    def train_student(self, epochs: Optional[int] = None) -> float:
        """Alg. 1 lines 11–12 on every released pair (post-processing)."""
        cfg = self.cfg
        if cfg.student_data == "sources":
            return self._train_on_sources()
        target = cfg.student_target
        x, y = _joined(self.buffer_x), _joined(self.buffer_y)  # x: z of the prior's inputs with store_z
        self.student.train()
        total, n = 0.0, 0
        epochs = cfg.student_epochs if epochs is None else epochs
        steps = epochs * -(-len(x) // cfg.minibatch)
        self._phase(f"round {self._round}/{cfg.releases}: student", epochs * len(x), "rows")
        for _ in range(epochs):
            for idx, scale in self.world.minibatches(torch.randperm(len(x), generator=self.rng), cfg.minibatch):
                if cfg.lr_schedule == "cosine":
                    for group in self.opt_s.param_groups:
                        group["lr"] = cfg.student_lr * 0.5 * (1 + math.cos(math.pi * n / steps))
                out = self._fit_forward(self._render(x[idx]))
                if target == "score":
                    loss = 0.5 * (out - out.mean(1, keepdim=True) - self.score_targets(y[idx])).pow(2).sum(1).mean()
                elif target == "centred":  # the same, shift-invariant: the noise's common shift is not fitted
                    loss = 0.5 * (out - out.mean(1, keepdim=True) - (y[idx] - y[idx].mean(1, keepdim=True))).pow(2).sum(1).mean()
                else:  # Algorithm 1 line 11: L_S(s, y_s), here ½‖s − y_s‖² (its gradient at release is γ·g̃)
                    loss = 0.5 * (out - y[idx]).pow(2).sum(1).mean()
                self.opt_s.zero_grad(set_to_none=True)
                (loss * scale).backward()
                self.opt_s.step()
                total, n = total + loss.item(), n + 1
                self._advance(len(idx) * self.world.size)  # the whole minibatch (each rank trains on its part)
            self._advance(0, self._agreement_status())
        return total / max(n, 1)

    @torch.no_grad()
    def adjust_for_query_prior(self, n: int = 20_000) -> torch.Tensor:
        """Logit adjustment: head bias −= the student's mean logits over (up to n of) the released queries.

        The student learns E[row | x] under the query distribution. A data-free
        prior puts most queries in one or two classes (FMNIST: sandal and bag),
        so that mean is far from zero, and under noise argmax then returns the
        query set's majority class on real inputs. Subtracting it is the logit
        adjustment for a label shift to a uniform class prior (Menon et al.
        2021). It uses only the student and the data-independent queries:
        post-processing, no ε. Returns the shift that was removed.
        """
        head = classifier(self.student)
        if head.bias is None:
            raise ValueError("logit_adjust needs a classifier with a bias")
        was_training = self.student.training
        self.student.eval()
        try:
            if self.source_targets is not None:  # views of source images: the queried images themselves
                queried = self.source_targets.active()
                x = self.prior.base_images(queried[torch.linspace(0, len(queried) - 1, min(n, len(queried))).long()])
            else:  # evenly spaced over the whole buffer (every release and source), gathered without concatenating it
                ends = torch.tensor([len(b) for b in self.buffer_x]).cumsum(0)
                idx = torch.linspace(0, int(ends[-1]) - 1, min(n, int(ends[-1]))).long()
                x = torch.cat([b[idx[(idx >= end - len(b)) & (idx < end)] - (end - len(b))] for b, end in zip(self.buffer_x, ends)])
            shift = (self._student_on(x) if self.source_targets is None else _batched(self._student, x, self.chunk)).mean(0)
            head.bias.sub_(shift)
        finally:
            self.student.train(was_training)
        return shift

    def attach_holdout(self, n: Optional[int] = None) -> None:
        """A held-out synthetic batch for the progress display only (1 000 inputs, fewer for large inputs: it is
        answered once and scored after every epoch).

        Its un-noised teacher labels are shown to the operator (who holds the
        teacher anyway) and never reach the student, the generator or the card.
        """
        if n is None:
            n = max(128, min(1000, 2**25 // self.input_values))
        main, self.rng = self.rng, torch.Generator().manual_seed(self.cfg.seed + 2000)  # its own stream: watching must not
        try:  # change the student (the CLI shows progress, the library need not)
            x = self.synthesise(n)
        finally:
            self.rng = main
        with torch.inference_mode():
            self._holdout = (x, _batched(self.teacher, x, self.chunk).argmax(1).cpu())

    @torch.no_grad()
    def holdout_agreement(self) -> Optional[float]:
        if getattr(self, "_holdout", None) is None:
            return None
        x, t = self._holdout
        was_training = self.student.training  # called between student epochs: leave the mode as found
        self.student.eval()
        try:
            return float((_batched(self._student, x, self.chunk).argmax(1).cpu() == t).float().mean())
        finally:
            self.student.train(was_training)

    def _phase(self, name: str, total: int, unit: str) -> None:
        """Progress: a named phase of ``total`` units starts (the CLI draws one bar per phase)."""
        if getattr(self, "on_progress", None):
            self.on_progress({"kind": "phase", "name": name, "total": int(total), "unit": unit})

    def _advance(self, done: int, status: str = "") -> None:
        if getattr(self, "on_progress", None):
            self.on_progress({"kind": "advance", "done": int(done), "status": status})

    def _agreement_status(self) -> str:
        """After student training: agreement with the teacher on the held-out synthetic batch (shown to the operator)."""
        a = self.holdout_agreement()
        return "" if a is None else f"agreement {a:.2f}"

    def train_generator(self) -> float:
        """Alg. 1 lines 13–14: L_S + L_G with the student as a fixed discriminator (post-processing)."""
        cfg = self.cfg
        self.student.eval()
        for p in self.student.parameters():
            p.requires_grad_(False)
        total = 0.0
        self._phase(f"round {self._round}/{cfg.releases}: generator", cfg.generator_steps, "steps")
        try:
            for _ in range(cfg.generator_steps):
                z, labels = self.sample(cfg.gen_batch)
                x = self._generate(z, labels)
                feats = self.student.forward_features(nhwc(x))
                s = self.student.forward_head(feats)
                target = labels if self.generator.num_classes else s.argmax(1)
                p_mean = F.softmax(s, 1).mean(0)
                loss = cfg.loss_ce * F.cross_entropy(s, target)
                loss = loss + cfg.loss_balance * (p_mean * torch.log(p_mean + 1e-8)).sum()
                loss = loss - cfg.loss_activation * feats.abs().mean()
                self.opt_g.zero_grad(set_to_none=True)
                loss.backward()
                self.opt_g.step()
                total += loss.item()
                self._advance(1)
        finally:
            for p in self.student.parameters():
                p.requires_grad_(True)
        return total / max(cfg.generator_steps, 1)

    def estimate(self, probe: int = 256) -> dict:
        """What the run will cost on this machine, from timing the teacher and one student step on ``probe`` query inputs
        (a copy of the student: the run itself is unchanged). Console only: no private data is involved."""
        import copy

        cfg, n = self.cfg, min(probe, self.chunk)
        x = self.probe_inputs(n)
        with torch.inference_mode(), self._autocast():
            self.teacher(x[:2])  # warm-up: lazy initialisation is not throughput
            t0 = time.perf_counter()
            self.teacher(x)
            teacher = (time.perf_counter() - t0) / n
        twin = copy.deepcopy(self.student).train()
        with self._autocast():
            twin(nhwc(x[:2])).float().sum().backward()
            t0 = time.perf_counter()
            twin(nhwc(x)).float().sum().backward()
        student = (time.perf_counter() - t0) / n
        rows, per_row = cfg.batch_size * cfg.releases, (self.prior.nz if self.store_z else x[0].numel())
        return {"kind": "estimate", "probe": n, "teacher_seconds": rows * teacher / self.world.size,
                "student_seconds": self._planned_student_samples() * student / self.world.size,
                "kept_bytes": 4 * per_row * (rows if cfg.student_data == "rows" else 0), "kept_as": "z" if self.store_z else "images"}

    def _student_samples(self, rows_released: int) -> int:
        """Student samples in one round: a fixed number (sources), or every row released so far, each epoch (rows)."""
        cfg = self.cfg
        return cfg.student_samples if cfg.student_data == "sources" else cfg.student_epochs * rows_released

    def _planned_student_samples(self) -> int:
        """Student samples over the whole run: round r follows r releases of B rows."""
        return sum(self._student_samples(r * self.cfg.batch_size) for r in range(1, self.cfg.releases + 1))

    def _student_items(self) -> int:
        return self._student_samples(sum(len(b) for b in self.buffer_x))

    def run(self, on_round: Optional[Callable[[RoundInfo], None]] = None, on_progress: Optional[Callable[[dict], None]] = None) -> None:
        self.on_progress = on_progress
        for r in range(1, self.cfg.releases + 1):
            t0 = time.perf_counter()
            self._round = r
            self.choose_sources(r)
            times = self.release()
            t1 = time.perf_counter()
            with phase("student training", items=self._student_items()):
                ls = self.train_student()
            times["student"] += time.perf_counter() - t1
            lg = 0.0
            if r < self.cfg.releases and self.cfg.generator_steps and self.generator is not None:
                t1 = time.perf_counter()
                with phase("generator training", items=self.cfg.generator_steps * self.cfg.gen_batch):
                    lg = self.train_generator()
                times["generator"] += time.perf_counter() - t1
            if r == self.cfg.releases and self.cfg.logit_adjust:
                self.adjust_for_query_prior()
            if on_round:
                on_round(RoundInfo(r, self.accountant.count(NormalisedGaussianRelease.mechanism), ls, lg, time.perf_counter() - t0, times))
