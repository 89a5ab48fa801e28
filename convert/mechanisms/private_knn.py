"""Private-kNN ("Private-kNN: Practical Differential Privacy for Computer Vision"): record-level DP labels for public queries.

For each query: a Poisson subsample of the private set (each record kept
independently with probability γ), the k nearest kept records in a feature
space φ that never saw private labels, noisy screening
(max vote + N(0, σ1²) ≥ T), and — on a fresh, independent Poisson subsample —
a noisy argmax (votes + N(0, σ2²)). ``PknnMechanism`` is the only place that
draws the subsamples and the noise, and it reports each use to the
accountant as it happens. The student then learns from answered queries
(post-processing); its features become φ for the next round.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from dpconvert.accounting import PknnAccountant
from dpconvert.distributed import LOCAL, World


FAISS_MIN_RECORDS = 1_000_000  # --knn auto uses faiss (when installed) from this private-set size on


def resolve_knn(name: str, n: int) -> str:
    from dpconvert.errors import DpconvertError

    if name not in ("auto", "exact", "faiss"):
        raise DpconvertError(fix=f"`knn` must be auto, exact or faiss, got {name!r}", param="knn")
    have_faiss = _faiss_available()
    if name == "faiss" and not have_faiss:
        raise DpconvertError("`knn` faiss needs the optional extra", fix="pip install 'dpconvert[faiss]' (or faiss-cpu)", param="knn")
    if name == "auto":
        return "faiss" if n >= FAISS_MIN_RECORDS and have_faiss else "exact"
    return name


def _faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


class PknnMechanism:
    """Under torchrun (``world``) this rank holds records ``world.shard(num_records)`` of the private set (``private_labels``
    and the features passed in are that shard) and draws their Poisson bits; each rank's k nearest kept records are
    merged into the exact k nearest of the whole set, and the vote noise is drawn once and shared. ``replicated_stream``:
    every rank holds the same (seeded) stream and draws what one process would, keeping its own columns of each mask."""

    mechanisms = ("pknn_screening", "pknn_argmax")

    def __init__(self, private_labels: torch.Tensor, num_classes: int, *, k: int, sampling_rate: float, sigma1: float,
                 threshold: float, sigma2: float, accountant: PknnAccountant, generator: torch.Generator, chunk: int = 256,
                 knn: str = "exact", oversample: float = 2.0, world: World = LOCAL, num_records: Optional[int] = None,
                 replicated_stream: bool = False) -> None:
        self.labels, self.num_classes = private_labels.long(), num_classes
        self.world, self.replicated_stream = world, replicated_stream
        self.num_records = len(private_labels) if num_records is None else int(num_records)
        if world.distributed and knn != "exact":
            raise ValueError("across processes the kNN search is the sharded exact one")
        self.k, self.gamma, self.sigma1, self.threshold, self.sigma2 = int(k), float(sampling_rate), float(sigma1), float(threshold), float(sigma2)
        self.accountant, self.rng, self.chunk = accountant, generator, chunk
        self.knn, self.oversample = knn, oversample
        self.on_chunk: Optional[Callable[[int], None]] = None  # progress: called with the number of queries voted on
        self._index = None  # faiss index over the private features (built on first use, per feature matrix)

    def poisson_mask(self, rows: int, n: int) -> torch.Tensor:
        """Independent Bernoulli(γ) per (query, record): one Poisson subsample per query. Across processes: this rank's
        records' bits of a mask over all ``num_records``."""
        if self.world.distributed and not self.replicated_stream:
            return torch.rand(rows, n, generator=self.rng) < self.gamma
        mask = torch.rand(rows, self.num_records if self.world.distributed else n, generator=self.rng) < self.gamma
        return mask[:, self.world.shard(self.num_records)] if self.world.distributed else mask

    def _shared_noise(self, *shape: int) -> torch.Tensor:
        """N(0, 1) draws that every rank holds alike: rank 0's, broadcast (from the stream itself when replicated)."""
        if not self.world.distributed or self.replicated_stream:
            return torch.randn(shape, generator=self.rng)
        noise = torch.randn(shape, generator=self.rng) if self.world.is_main else torch.zeros(shape)
        return self.world.broadcast(noise)

    def votes(self, qfeats: torch.Tensor, pfeats: torch.Tensor) -> torch.Tensor:
        """Vote histogram (m, K) of the k nearest *kept* records, a fresh Poisson subsample per query."""
        if self.knn == "faiss":
            return self._votes_oversampled(qfeats, pfeats)
        out = []
        for q in qfeats.split(self.chunk):
            d = torch.cdist(q, pfeats)
            d.masked_fill_(~self.poisson_mask(*d.shape), float("inf"))
            dist, idx = d.topk(min(self.k, d.shape[1]), dim=1, largest=False)
            labels = self.labels[idx]
            if self.world.distributed:
                dist, labels = self._merge_ranks(dist, labels)
            valid = torch.isfinite(dist)  # fewer than k kept records: only real neighbours vote
            out.append(self._histogram_of(labels, valid))
            self._tick(len(q))
        return torch.cat(out) if out else torch.zeros(0, self.num_classes)

    def _merge_ranks(self, dist: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The k nearest kept records of the whole set from each rank's k nearest kept ones (exact: any record among
        the global k nearest is among its own rank's k nearest)."""
        k, rows = self.k, len(dist)
        pad_d = torch.full((rows, k), float("inf"))
        pad_l = torch.zeros((rows, k), dtype=torch.long)
        pad_d[:, : dist.shape[1]], pad_l[:, : dist.shape[1]] = dist, labels
        w = self.world
        all_d = w.gather_rows(pad_d.reshape(1, -1), w.size).reshape(w.size, rows, k).permute(1, 0, 2).reshape(rows, -1)
        all_l = w.gather_rows(pad_l.reshape(1, -1), w.size).reshape(w.size, rows, k).permute(1, 0, 2).reshape(rows, -1)
        dist, pos = all_d.topk(min(k, self.num_records), dim=1, largest=False)
        return dist, all_l.gather(1, pos)

    def _tick(self, n: int) -> None:
        if self.on_chunk is not None:
            self.on_chunk(n)

    def _histogram(self, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        return self._histogram_of(self.labels[idx], valid)

    def _histogram_of(self, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(labels, self.num_classes) * valid.unsqueeze(-1)
        return onehot.sum(1).float()

    def _votes_oversampled(self, qfeats: torch.Tensor, pfeats: torch.Tensor) -> torch.Tensor:
        """Exact kNN under a Poisson mask without drawing n bits per query (large private sets).

        Why this is the same mechanism: the k nearest *kept* records depend only on
        the inclusion bits of the records nearer than the k-th kept one. An exact
        index (faiss ``IndexFlatL2``) returns each query's m = ⌈oversample·k/γ⌉
        nearest records in distance order; their bits are drawn i.i.d. Bernoulli(γ)
        here, and the bits of every farther record cannot change the result as long
        as at least k candidates are kept. Since the bits are independent of the
        distances, drawing them lazily in distance order has the same joint
        distribution as drawing all n up front. A query with fewer than k kept
        candidates falls back to the full mask, reusing the bits already drawn for
        its candidates and drawing fresh ones for everyone else, so the output stays
        exact. Every call draws new bits: screening and argmax still see independent
        subsamples.
        """
        import math

        n = len(pfeats)
        m = min(n, math.ceil(self.oversample * self.k / self.gamma))
        index = self._faiss_index(pfeats)
        out = []
        for q in qfeats.split(self.chunk):
            _, cand = index.search(q.contiguous().numpy().astype("float32"), m)
            cand = torch.from_numpy(cand).long()
            kept = torch.rand(cand.shape, generator=self.rng) < self.gamma
            enough = kept.sum(1) >= min(self.k, n)
            # first k kept candidates, in distance order: stable sort puts kept ones first without reordering them
            order = torch.sort((~kept).to(torch.uint8), dim=1, stable=True).indices[:, : self.k]
            idx = cand.gather(1, order)
            valid = kept.gather(1, order)
            hist = self._histogram(idx, valid)
            for i in (~enough).nonzero().flatten().tolist():
                hist[i] = self._votes_fallback(q[i], pfeats, cand[i], kept[i])
            out.append(hist)
            self._tick(len(q))
        return torch.cat(out) if out else torch.zeros(0, self.num_classes)

    def _votes_fallback(self, q: torch.Tensor, pfeats: torch.Tensor, cand: torch.Tensor, cand_kept: torch.Tensor) -> torch.Tensor:
        mask = self.poisson_mask(1, len(pfeats))[0]
        mask[cand] = cand_kept  # the bits already drawn stay as drawn
        d = torch.cdist(q[None], pfeats)[0].masked_fill(~mask, float("inf"))
        dist, idx = d.topk(min(self.k, len(d)), largest=False)
        return self._histogram(idx[None], torch.isfinite(dist)[None])[0]

    def _faiss_index(self, pfeats: torch.Tensor):
        import faiss

        if self._index is None or self._index[0] is not pfeats:
            index = faiss.IndexFlatL2(pfeats.shape[1])  # exact L2 search (no approximation)
            index.add(pfeats.contiguous().numpy().astype("float32"))
            self._index = (pfeats, index)
        return self._index[1]

    def screen(self, qfeats: torch.Tensor, pfeats: torch.Tensor) -> torch.Tensor:
        counts = self.votes(qfeats, pfeats)
        noisy_max = counts.max(1).values + self._shared_noise(len(counts)) * self.sigma1
        self.accountant.record("pknn_screening", count=len(counts), k=self.k, num_classes=self.num_classes,
                               sigma1=self.sigma1, threshold=self.threshold, sampling_rate=self.gamma)
        return noisy_max >= self.threshold

    def noisy_histogram(self, qfeats: torch.Tensor, pfeats: torch.Tensor) -> torch.Tensor:
        """Votes + N(0, σ2²) on every class: the subsampled Gaussian mechanism the accountant charges.

        The accountant's argmax event is the Gaussian mechanism on the whole histogram (L2 sensitivity √2),
        so releasing the noisy histogram itself costs exactly what releasing its argmax costs.
        """
        counts = self.votes(qfeats, pfeats)  # a new, independent subsample: charging only answered queries needs it
        noisy = counts + self._shared_noise(*counts.shape) * self.sigma2
        self.accountant.record("pknn_argmax", count=len(counts), sigma2=self.sigma2, sampling_rate=self.gamma, num_classes=self.num_classes)
        return noisy

    def answer(self, qfeats: torch.Tensor, pfeats: torch.Tensor) -> torch.Tensor:
        """The noisy argmax label (the paper's label)."""
        return self.noisy_histogram(qfeats, pfeats).argmax(1)


def histogram_targets(noisy: torch.Tensor, labels: str, temperature: float, sigma2: float) -> torch.Tensor:
    """Training targets (m, K) from released noisy histograms (post-processing): one-hot argmax or softmax(h̃ / (t·σ2))."""
    if labels == "hard":
        return F.one_hot(noisy.argmax(1), noisy.shape[1]).float()
    if labels == "soft":
        return F.softmax(noisy / (temperature * sigma2), dim=1)
    raise ValueError(f"unknown Private-kNN label mode {labels!r} (hard or soft)")


def train_classifier(student: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int, lr: float, minibatch: int,
                     generator: torch.Generator, flip: bool = True, balance: bool = False, world: World = LOCAL) -> None:
    """Supervised training on DP labels (post-processing). ``balance``: class weights ∝ 1/(count of each label).
    Across processes each rank trains on its part of every minibatch under DDP (the same draws on every rank)."""
    from dpconvert.distill.models import student_classes

    weight = class_balance_weights(y, student_classes(student)) if balance else None
    opt = torch.optim.AdamW(student.parameters(), lr=lr, weight_decay=5e-4)
    steps = max(1, epochs * -(-len(x) // minibatch))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    from dpconvert.distill.models import nhwc

    student.to(memory_format=torch.channels_last).train()  # NHWC: CPU convolutions ~1.5× faster, the same arithmetic
    model = world.wrap_for_training(student)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=generator).split(minibatch):
            xb = x[idx]
            if flip:
                f = torch.rand(len(idx), generator=generator) < 0.5
                xb = torch.where(f.view(-1, 1, 1, 1), xb.flip(3), xb)
            shift = torch.randint(-2, 3, (2,), generator=generator).tolist()
            xb = torch.roll(xb, shifts=shift, dims=(2, 3))
            pos, scale = world.part(torch.arange(len(idx)))  # this rank's part (all of it in one process)
            if pos is None:
                continue
            loss = F.cross_entropy(model(nhwc(xb[pos])), y[idx[pos]], weight=weight)  # y: class indices or (m, K) target distributions
            opt.zero_grad(set_to_none=True)
            (loss * scale).backward()
            opt.step()
            sched.step()
    student.to(memory_format=torch.contiguous_format).eval()


def class_balance_weights(y: torch.Tensor, num_classes: int, max_weight: float = 5.0) -> torch.Tensor:
    """Per-class loss weights n / (K · n_c) from the training targets (labels or distributions), capped at ``max_weight``.

    Screening answers the easy classes more often, so the answered set is skewed; the weights undo that skew
    towards a uniform class prior. They are computed from released labels only (post-processing).
    """
    counts = y.float().sum(0) if y.dim() == 2 else torch.bincount(y, minlength=num_classes).float()
    return (counts.sum() / (num_classes * counts.clamp_min(1.0))).clamp(max=max_weight)


def student_features(student: torch.nn.Module) -> Callable:
    def phi(x):
        f = student.forward_features(x)
        return F.normalize(f.flatten(1), dim=1)

    return phi


def combine_features(opts, first, student):
    """φ after round 1 from its parts: the student's features, or (``round_features="student+first"``) them beside
    the first map's, down-weighted by ``round_features_weight`` before a joint normalisation."""
    import torch
    import torch.nn.functional as F

    if opts.round_features == "student":
        return student
    return F.normalize(torch.cat([first, opts.round_features_weight * student], 1), dim=1)


def next_round_features(opts, student, first_phi):
    """φ for the next round as a function of x (the rounds themselves reuse the first map's features of the private set)."""
    phi_s = student_features(student)
    return lambda x: combine_features(opts, first_phi(x), phi_s(x))


class PrivateKnnRounds:
    """Private-kNN over the private records, round by round: opens them (with any canaries, which are extra records
    and weaken nothing), keeps this rank's shard and their first-map features, and labels each round's queries by
    the screening and the noisy argmax. What leaves is which queries were answered and their noisy histograms."""

    def __init__(self, records, world: World = LOCAL) -> None:
        private = records.open_records()
        self.world, self._x, self._y = world, private.x, private.y.long()
        self.num_records = len(private)  # for the operator's console notes only, never the card
        self._first = None
        self.mech: Optional[PknnMechanism] = None

    def start(self, num_classes: int, canaries=None, *, knn: str, on_chunk=None, **mechanism) -> PknnMechanism:
        """Append the included canaries ((x, y, inclusion bits), or None), take this rank's shard, build the mechanism
        (``mechanism``: PknnMechanism's k, sampling_rate, sigma1, threshold, sigma2, accountant, noise, chunk)."""
        from dpconvert.mechanisms.noise import as_generator

        x, y = self._x, self._y
        if canaries is not None:
            cx, cy, bits = canaries
            x, y = torch.cat([x, cx[bits]]), torch.cat([y, cy[bits]])
        n = len(x)
        mine = self.world.shard(n)
        self._x, self._y = x[mine], y[mine]
        noise = mechanism.pop("noise")
        self.mech = PknnMechanism(self._y, num_classes, **mechanism, generator=as_generator(noise), world=self.world, num_records=n,
                                  knn="exact" if self.world.distributed else resolve_knn(knn, n), replicated_stream=getattr(noise, "seeded", False))
        self.mech.on_chunk = on_chunk
        return self.mech

    def label(self, opts, qx: torch.Tensor, first_phi: Callable, student=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(answered mask, noisy histograms of the answered queries) for queries ``qx``: φ is the first map in round 1,
        then the student's features beside it (``opts``: round_features, round_features_weight). The student saw
        public queries and DP labels only, so its features of the private records are post-processing."""
        from dpconvert.distill.features import batched_features
        from dpconvert.profiling import phase

        with phase("features", items=len(self._x) + len(qx)):
            if student is None:
                pfeats = self._first = batched_features(first_phi, self._x)  # kept: later rounds reuse it
                qfeats = batched_features(first_phi, qx)
            else:
                phi_s = student_features(student)
                pfeats = combine_features(opts, self._first, batched_features(phi_s, self._x))
                qfeats = combine_features(opts, batched_features(first_phi, qx), batched_features(phi_s, qx))
        with phase("kNN votes", items=len(qx)):
            answered = self.mech.screen(qfeats, pfeats)
            return answered, self.mech.noisy_histogram(qfeats[answered], pfeats)
