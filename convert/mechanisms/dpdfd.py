"""DPDFD: differentially private data-free distillation ("Differentially Private Data-Free Distillation", Algorithm 1).

The only teacher information that leaves this module's release step is the output of ``NormalisedGaussianRelease``:
per-row normalised, Gaussian-noised gradients of L_T w.r.t. the student logits. Everything after it — the student
update, replaying released (x, y_s) pairs, the generator update against the student — is post-processing
(docs/methods.md) and lives in ``convert/distill/``. The teacher is only ever called forward, under
``torch.inference_mode()``.

A release = ``batch_size`` rows (one accountant event). The rounds (``distill/rounds.py``) follow each with
``student_epochs`` passes of the student over every pair released so far and ``generator_steps`` generator updates
with the student as a fixed discriminator. ε depends on σ and the number of releases only; the batch size and the replay are free for the
query-level guarantee (the record-level worst case grows with √B: the card shows it).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from dpconvert.accounting import DpdfdAccountant
from dpconvert.distill.config import DpdfdConfig
from dpconvert.distill.models import TEACHER_BATCH, StudentModel, batched, classifier, rows_per_call, rows_per_group, student_classes
from dpconvert.distill.progress import Progress
from dpconvert.distill.queries import QueryDraws
from dpconvert.distill.rounds import planned_student_samples
from dpconvert.distill.student_training import head_refit_applies
from dpconvert.distributed import LOCAL, World
from dpconvert.errors import DpconvertError
from dpconvert.mechanisms.distinct_inputs import AnsweredInputs, first_by_hash, flat_inputs, row_hash
from dpconvert.mechanisms.gaussian_release import NormalisedGaussianRelease
from dpconvert.mechanisms.noise import as_generator, noise_stream
from dpconvert.mechanisms.output_gradients import label_log_likelihood, per_sample_output_gradient
from dpconvert.profiling import median_seconds, phase
from dpconvert.seeds import stream


class Dpdfd:
    """DPDFD's release: each call chooses fresh queries (``distill/queries.py``) and releases the teacher's noisy
    output gradients on them (here: the only code that calls the teacher or draws the noise), returning the released
    targets. The rounds around it — the student and the generator trained on released rows only — are post-processing
    (``distill/rounds.py``)."""

    def __init__(self, teacher: Callable, student: torch.nn.Module, generator: Optional[torch.nn.Module], cfg: DpdfdConfig,
                 accountant: DpdfdAccountant, device: str = "cpu", prior: Optional[torch.nn.Module] = None,
                 noise=None, world: World = LOCAL) -> None:
        """``noise``: the run's ``NoiseStream`` (a bare generator in tests; default: a secret one). ``world``: under
        torchrun, this rank answers and noises its shard of every release and trains the student with DDP
        (convert/distributed.py); a seeded noise stream is the same on every rank."""
        self.teacher, self.cfg, self.world, self.device = teacher, cfg, world, device
        self.members = list(getattr(teacher, "members", None) or [teacher])  # several teachers: each row averages theirs
        self.student = student.to(device).to(memory_format=torch.channels_last)
        self.generator = generator.to(device) if generator is not None else None
        self.prior = prior.to(device) if prior is not None else None
        if self.generator is None and self.prior is None:
            raise ValueError("DPDFD needs a generator, a prior, or both")
        if cfg.student_data == "sources" and (generator is not None or not hasattr(prior, "base_index")):
            raise ValueError("student_data 'sources' needs queries that are views of source images (public images) and no generator")
        if cfg.zero_head:
            head = classifier(self.student)
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
        # the DP noise: its own stream (mechanisms/noise.py: secret unless seeded noise was asked for)
        noise = noise if noise is not None else noise_stream(cfg.seed)
        self.mechanism = NormalisedGaussianRelease(sigma=cfg.sigma, clip=cfg.clip, accountant=accountant, generator=as_generator(noise),
                                                   world=world, replicated_stream=getattr(noise, "seeded", False))
        self.model = StudentModel(self.student, device, cfg.amp, world)
        self.accountant = accountant
        self.progress = Progress()
        self.rng = torch.Generator(device="cpu").manual_seed(cfg.seed)  # the query stream (queries, student order)
        self.num_classes = student_classes(student)
        self.queries = QueryDraws(cfg, self.prior, self.generator, self.model, self.rng, self.num_classes, TEACHER_BATCH, device)
        self.source_rows: Optional[torch.Tensor] = None  # rows released per public source image (public-image queries)
        self._last_sources: Optional[torch.Tensor] = None
        self.answered = AnsweredInputs()  # every input answered so far, over all releases (m_max = 1)
        self._round = 1  # the round in progress (progress display)
        self.input_values = pixels = self.probe_inputs(1)[0].numel()  # values per input (C·H·W)
        self.chunk = self.queries.chunk = rows_per_call(pixels)
        self.group = rows_per_group(pixels)  # rows the release answers at once, a teacher call (self.chunk) at a time
        # queries that are a function of z (a prior, public-image views; no learned generator) are kept as z when the
        # inputs would not fit in image_buffer_bytes — 152 floats for a 3×224×224 random field instead of 150 528 — and
        # rendered again when the student needs them (re-rendering costs time: small releases keep their images)
        self.store_z = self.generator is None and (
            cfg.student_data == "sources" or 4 * pixels * cfg.batch_size * cfg.releases > cfg.image_buffer_bytes)

    def render(self, rows: torch.Tensor) -> torch.Tensor:
        """Inputs from buffered rows (z of the prior, or the inputs themselves when a generator made them)."""
        return self.prior(rows) if self.store_z else rows

    def student_on(self, rows: torch.Tensor) -> torch.Tensor:
        """Student logits (no gradient) for rows (z or inputs), rendered and run a chunk at a time."""
        return batched(lambda r: self.model(self.render(r)), rows, self.chunk)

    def releases_done(self) -> int:
        return self.accountant.count(NormalisedGaussianRelease.mechanism)

    # ------------------------------------------------------------ queries, each answered once in the run
    @torch.no_grad()
    def synthesise(self, n: int) -> torch.Tensor:
        """n fresh inputs (checks, progress, the parity probe): a ``prior_fraction`` share from the prior, the rest from
        the generator; no student-guided selection."""
        return self.queries.with_sources(n)[0]

    @torch.no_grad()
    def probe_inputs(self, n: int) -> torch.Tensor:
        """n inputs from the query source for checks before the first release; the query stream is left as it was."""
        return self._off_stream(self.synthesise, n)

    @torch.no_grad()
    def probe_rows(self, n: int) -> torch.Tensor:
        """n rows as a release keeps them (the prior's z with ``store_z``, else inputs); the query stream is left as it was."""
        return self._off_stream(self.queries.source_z, n) if self.store_z else self.probe_inputs(n)

    def _off_stream(self, draw, n: int) -> torch.Tensor:
        """``draw(n)`` with the query stream restored afterwards (probes must not change what the run then asks)."""
        state = self.rng.get_state()
        try:
            return draw(n)
        finally:
            self.rng.set_state(state)

    @torch.no_grad()
    def distinct_queries(self, n: int, max_rounds: int = 20) -> torch.Tensor:
        """n pairwise-distinct inputs for one release, none answered by an earlier release.

        The query-level analysis (docs/privacy.md) lets one teacher answer move
        one row of the release by at most C. The same input twice in a release
        puts that answer in two rows (L2 sensitivity √2·C, and its noise would
        average away), so repeated inputs (e.g. a public image under the same
        shift and flip) are replaced by fresh draws. Continuous priors never repeat,
        and then this costs one sort and changes nothing.
        """
        pool = self.cfg.prior_pool if self._round > 1 and self.cfg.student_data == "rows" else 1  # after the first release
        (x, src), h = self._distinct(lambda k: self.queries.with_sources(k, pool), lambda x: x, n, max_rounds)
        self._last_sources, self.answered.pending = src, h
        return x

    @torch.no_grad()
    def distinct_prior_draws(self, n: int, max_rounds: int = 20) -> torch.Tensor:
        """``distinct_queries`` for a prior that is a function of z: the z of n pairwise-distinct inputs, checked by
        hash without keeping the inputs (a release of millions of 28×28 rows would not fit in memory as images)."""
        (z,), self._draw_hashes = self._distinct(lambda k: (self.queries.source_z(k),), self.prior, n, max_rounds)
        return z

    def _distinct(self, draw: Callable, inputs_of: Callable, n: int, max_rounds: int) -> tuple[tuple, torch.Tensor]:
        """(aligned tensors, row hashes) of n draws whose inputs are pairwise distinct and not answered before.
        ``draw(k)``: k draws as a tuple of aligned tensors, the first of which ``inputs_of`` turns into the inputs
        (hashed a chunk at a time, never all kept as images)."""
        def flat(first):
            return flat_inputs(inputs_of(first), self.cfg.amp)

        def hashed(first):
            return batched(lambda c: row_hash(flat(c)), first, self.chunk)

        rows = draw(n)
        h = hashed(rows[0])
        for round_ in range(max_rounds):
            keep = self.answered.fresh(h, first_by_hash(h, lambda idx: flat(rows[0][idx])))
            rows, h = tuple(r[keep] for r in rows), h[keep]
            distinct = len(h)
            if distinct >= n:
                return tuple(r[:n] for r in rows), h[:n]
            if round_ + 1 < max_rounds:  # only the new draws are hashed: a million rows with 17 repeats were hashed twice
                more = draw(n - distinct)
                rows, h = tuple(torch.cat([a, b]) for a, b in zip(rows, more)), torch.cat([h, hashed(more[0])])
        raise DpconvertError(f"the query source gave only {distinct} distinct inputs not answered before for a release of {n}",
                             fix="lower `batch_size` or `releases`, or give more `public_data` images", param="batch_size")

    @torch.no_grad()
    def distinct_prior_queries(self, n: int) -> torch.Tensor:
        """The z of n pairwise-distinct prior inputs for one release; after the first release (rows mode) a
        class-balanced, student-confident n out of ``prior_pool``·n."""
        pool = self.cfg.prior_pool if self._round > 1 and self.cfg.student_data == "rows" else 1
        z = self.distinct_prior_draws(n * pool)
        if pool == 1:
            self.answered.pending = self._draw_hashes
            return z
        self.student.eval()
        pick = self.queries.select_balanced(self.student_on(z), n)
        self.answered.pending = self._draw_hashes[pick.cpu()]
        return z[pick]

    def _count_source_rows(self, src: Optional[torch.Tensor]) -> None:
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

    # ------------------------------------------------------------ the release
    def release(self, round_: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Alg. 1 lines 2–10: synthesise B inputs, query the teacher, release noisy output gradients. Returns the
        rows (z with ``store_z``), their released targets y_s = s − γ·g̃ (Alg. 1 line 10; for the CE release the
        label log-likelihood instead) and the phase times."""
        cfg, times = self.cfg, {}
        self._round = round_
        t0 = time.perf_counter()
        self.progress.phase(f"release {self._round}/{cfg.releases}: queries", cfg.batch_size, "rows")
        with phase("queries", items=cfg.batch_size):
            rows = self.distinct_prior_queries(cfg.batch_size) if self.store_z else self.distinct_queries(cfg.batch_size)
        self.progress.advance(cfg.batch_size)
        times["generator"] = time.perf_counter() - t0
        self.answered.remember_pending()  # before the teacher sees them: a repeat stops the run before anything is released
        s_logits, g_noisy, times["teacher"], times["student"] = self._noisy_rows(rows)
        t0 = time.perf_counter()
        sources = self.prior.sources(rows) if self.store_z and hasattr(self.prior, "sources") else self._last_sources
        self._count_source_rows(None if sources is None else sources.cpu())
        if cfg.student_data == "sources":  # per-image targets: averaged per source image by the rounds
            y_s = s_logits.cpu() - cfg.target_step * g_noisy.cpu()
        else:
            y_s = label_log_likelihood(s_logits, g_noisy, self.mechanism) if cfg.student_target == "score" else s_logits - cfg.target_step * g_noisy
        times["student"] += time.perf_counter() - t0
        return rows, y_s, times

    def _noisy_rows(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float, float]:
        """(student logits, the noisy release, teacher seconds, release seconds) for one release's rows (z or inputs),
        rendered and answered a chunk at a time; under torchrun this rank answers its shard only."""
        t0 = time.perf_counter()
        mine = rows[self.world.shard(len(rows))]
        self.student.eval()
        self.progress.phase(f"release {self._round}/{self.cfg.releases}: teacher", len(mine), "rows")
        zero_student = None  # known after the first group: see _student_answers_zero

        def answer(group: torch.Tensor) -> torch.Tensor:
            nonlocal zero_student
            answered = self._answer(group, student=not zero_student)
            zero_student = self._student_answers_zero(answered[:, :self.num_classes]) if zero_student is None else zero_student
            self.progress.advance(len(group))
            return answered

        with phase("teacher forward", items=len(mine)):
            # one preallocated output (distill/models.batched), not per-chunk lists: those fragmented glibc's heap
            # under the allocator settings of convert/allocator.py (a 3 M-row release grew ~90 MB/s to 21 GB)
            answered = batched(answer, mine, self.group)
        t1 = time.perf_counter()
        with phase("release", items=len(rows)):
            k = self.num_classes
            g_noisy = self.mechanism.release(answered[:, k:], total=len(rows), teachers=len(self.members))
            s_logits = self.world.gather_rows(answered[:, :k].clone(), len(rows))
            del answered  # nothing un-noised from the teacher survives this function
        return s_logits, g_noisy, t1 - t0, time.perf_counter() - t1

    @torch.no_grad()
    def _answer(self, group: torch.Tensor, student: bool = True) -> torch.Tensor:
        """[student logits | pre-noise rows] of a group of rows (z or inputs): rendered, the student's forward (exactly 0
        with ``student`` False: a zero-head student, _student_answers_zero) and the teacher's, a call at a time."""
        x = self.render(group)
        s_logits = batched(self.model, x, self.chunk) if student else torch.zeros(len(x), self.num_classes, device=x.device)
        return torch.cat([s_logits, self._rows(x, s_logits)], 1)

    def _student_answers_zero(self, s_logits: torch.Tensor) -> bool:
        """True while the student's classifier is all zeros (``zero_head``, before it trained) and it answered exactly 0
        on a whole group of rows: then it answers 0 on every input, and the release skips its forward pass (on 28×28 ~40 % of
        the teacher phase) — the rows are the same numbers."""
        if not self.cfg.zero_head:
            return False
        head = classifier(self.student)
        zero_head = not head.weight.any() and (head.bias is None or not head.bias.any())
        return bool(zero_head and not s_logits.any())

    def _rows(self, x: torch.Tensor, s_logits: torch.Tensor) -> torch.Tensor:
        """The pre-noise rows for inputs ``x``: one teacher's output gradients (normalised by the release), or with
        several teachers the mean of each one's normalised rows (``NormalisedGaussianRelease.mean_of_normalised``)."""
        grads = []
        for teacher in self.members:
            with torch.inference_mode(), self.model.autocast():
                t_logits = batched(teacher, x, self.chunk).to(self.device).float()
            grads.append(per_sample_output_gradient(s_logits, t_logits.clone(), self.cfg))
            del t_logits
        return grads[0] if len(grads) == 1 else self.mechanism.mean_of_normalised(grads)

    def _student_forward_share(self) -> float:
        """The share of released rows the student answers before the release (all but the first release of a
        zero-head student: _student_answers_zero)."""
        return (self.cfg.releases - 1) / self.cfg.releases if self.cfg.zero_head else 1.0

    def _student_forward_seconds(self, x: torch.Tensor, timing: Callable = median_seconds, needed: bool = False) -> float:
        """Seconds per row of the student's forward pass on ``x`` (0 when no release runs it and not ``needed``)."""
        if not (self._student_forward_share() or needed):
            return 0.0
        was_training = self.student.training
        self.student.eval()  # as the release runs it; in train mode each timed call would move BatchNorm's running statistics
        try:  # (timed a load-dependent number of times: the same --seed gave another student on a busy machine)
            with torch.no_grad():
                return timing(lambda: self.model(x)) / len(x)
        finally:
            self.student.train(was_training)

    # ------------------------------------------------------------ what the operator sees
    def attach_holdout(self, n: Optional[int] = None) -> None:
        """A held-out synthetic batch for the progress display only (1 000 inputs, fewer for large inputs: it is
        answered once and scored after every epoch).

        Its un-noised teacher labels are shown to the operator (who holds the
        teacher anyway) and never reach the student, the generator or the card.
        """
        if n is None:
            n = max(128, min(1000, 2**25 // self.input_values))
        main, self.queries.rng = self.rng, stream("holdout", self.cfg.seed)  # its own stream: watching must not
        try:  # change the student (the CLI shows progress, the library need not)
            x = self.synthesise(n)
        finally:
            self.queries.rng = main
        with torch.inference_mode():
            self._holdout = (x, batched(self.teacher, x, self.chunk).argmax(1).cpu())
        self.progress.status = self._agreement_status

    @torch.no_grad()
    def holdout_agreement(self) -> Optional[float]:
        if getattr(self, "_holdout", None) is None:
            return None
        x, t = self._holdout
        was_training = self.student.training  # called between student epochs: leave the mode as found
        self.student.eval()
        try:
            return float((batched(self.model, x, self.chunk).argmax(1).cpu() == t).float().mean())
        finally:
            self.student.train(was_training)

    def _agreement_status(self) -> str:
        """After student training: agreement with the teacher on the held-out synthetic batch (shown to the operator)."""
        a = self.holdout_agreement()
        return "" if a is None else f"agreement {a:.2f}"

    def estimate(self, probe: int = 256, timing: Callable = median_seconds) -> dict:
        """What the run will cost on this machine, from timing the teacher and student steps on ``probe`` query inputs
        (a copy of the student: the run itself is unchanged). Each is timed repeatedly for a while and the median taken:
        one short timing on a loaded machine was off by up to 60× (a burst of the other load, or of thread start-up).
        ``timing``: ``profiling.sustained_seconds`` for a time budget (a longer window).
        Console only: no private data is involved."""
        import copy

        cfg, n = self.cfg, min(probe, self.chunk)
        self.probe_inputs(2)  # warm-up
        x = self.probe_inputs(n)
        render = timing(lambda: self.probe_inputs(n)) / n  # once per released row, and per student sample rendered from z
        # rows kept as z are hashed once more as views to keep them distinct (distinct_prior_draws): 6.5 M 28×28 rows spent
        # 197 s drawing queries where rendering alone was timed at 2 min
        hashing = timing(lambda: row_hash(flat_inputs(x, cfg.amp))) / n if self.store_z else 0.0
        # the teacher phase as the release runs it (_answer on a group of rows: rendered again from z, the rows computed,
        # torch and the teacher's runtime taking turns), not the teacher alone on one batch: that read an onnxruntime
        # teacher's phase ~35 % fast, and a run sized to 25 minutes took 33 (benchmarks/RESULTS.md, table 15)
        group = self.probe_rows(self.group)
        self._answer(group[:2], student=False)  # warm-up: lazy initialisation is not throughput
        teacher = timing(lambda: self._answer(group, student=False)) / len(group)
        rows = cfg.batch_size * cfg.releases
        # the student's forward on each row, except in the first release of a zero-head student (_student_answers_zero),
        # and once more on each after training for the refitted (ridge) head
        refit = cfg.student_data == "rows" and head_refit_applies(cfg, classifier(self.student), rows)
        forward = self._student_forward_seconds(x, timing, needed=refit)
        teacher += self._student_forward_share() * forward
        twin = StudentModel(copy.deepcopy(self.student).train(), self.device, cfg.amp, LOCAL)
        opt = torch.optim.Adam(twin.module.parameters(), lr=0.0)
        size = min(self.chunk, cfg.source_minibatch if cfg.student_data == "sources" else cfg.minibatch)
        batch = x[:size] if size <= n else self.probe_inputs(size)

        def step():  # one optimiser step on a training minibatch, as the trainer takes it
            opt.zero_grad(set_to_none=True)
            twin.fit_forward(batch).sum().backward()
            opt.step()

        step()
        student = timing(step) / len(batch)
        per_row = self.prior.nz if self.store_z else x[0].numel()
        student += render if self.store_z else 0.0  # rows kept as z, or views of source images: rendered again for every sample
        return {"kind": "estimate", "probe": n, "queries_seconds": rows * (render + hashing), "teacher_seconds": rows * teacher / self.world.size,
                "student_seconds": planned_student_samples(cfg) * student / self.world.size + (rows * forward if refit else 0.0),
                "kept_bytes": 4 * per_row * (rows if cfg.student_data == "rows" else 0), "kept_as": "z" if self.store_z else "images"}
