"""Private-kNN's options: the mechanism (k, γ, σ1, threshold, σ2), the rounds, the student, and the query source with
its own options (a DPDFD-trained or DP-critic GAN query generator)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from dpconvert.errors import DpconvertError

from .dpdfd_options import DpdfdOptions

LABELS = ("soft", "hard")
ROUND_FEATURES = ("student", "student+first")
KNN = ("auto", "exact", "faiss")
KNN_SEARCH = "exact k nearest kept records under a fresh per-query Poisson mask (torch, or faiss for large private sets: the same votes)"


@dataclass
class PknnOptions:
    k: int = 300
    sampling_rate: float = 0.1  # γ: each private record is kept independently with this probability, per query
    sigma1: float = 50.0  # screening noise
    # T_thr = threshold_ratio·k unless given. The paper uses 0.6; with σ1=50 and soft labels 0.4 answers more queries and
    # gives the better student on Fashion-MNIST (benchmarks/RESULTS.md).
    threshold: Optional[float] = None
    threshold_ratio: float = 0.4
    sigma2: Optional[float] = None  # argmax noise; calibrated to ε when None
    rounds: int = 2
    queries: Optional[int] = None  # queries over all rounds (default: every public image, or 5000 from a generator/prior)
    features: str = "hog_pca"  # first-round φ: hog_pca, hog, or timm:NAME[@FILE] (a public pretrained backbone)
    epochs: int = 40  # student epochs per round
    student_lr: float = 2e-3
    minibatch: int = 128
    chunk: int = 256  # queries per distance block (memory bound: chunk × n floats)
    knn: str = "auto"  # exact (torch, full Poisson mask), faiss (optional extra, for ≥1M records), auto
    # Student targets from the released noisy vote histogram: "hard" = its argmax (the paper), "soft" = softmax(h̃ / (t·σ2))
    # with t = label_temperature. The Gaussian argmax is post-processing of the noisy histogram, so both cost the same ε.
    labels: str = "soft"
    label_temperature: float = 1.0
    # φ after round 1: the student's features beside the first map (weight 0.5 on the student's part), or alone
    round_features: str = "student+first"
    round_features_weight: float = 0.5
    balance: bool = True  # class-balanced loss over the answered labels
    canaries: int = 0  # one-run canary audit with this many canaries (auditing/canaries.py)
    query_generator: Optional[str] = None  # FILE (saved with save_generator), "prior", "train" or "dpgan"; without public_data
    generator_eps: Optional[float] = None  # `query_generator` train/dpgan: the generator's share of ε (default half)
    # `query_generator` dpgan: the DP-critic GAN (methods/dpgan.py), trained on the private data; see GanOptions
    gan_critic: str = "embedding"  # "embedding" (one noisy mean-embedding release) or "dpsgd" (a DP-SGD-trained critic)
    gan_steps: int = 1000  # dpsgd: critic steps (each one noisy DP-SGD step on a Poisson lot)
    gan_sampling_rate: float = 0.02  # dpsgd: q of the critic's lots
    gan_clip: float = 1.0  # dpsgd: per-example gradient norm bound of the critic
    gan_features: int = 3000  # embedding: random Fourier frequencies
    gan_length_scale: float = 0.2  # embedding: kernel length scale in units of √(input dimensions), on [0, 1] pixels
    gan_generator_steps: int = 1500  # embedding: generator steps against the release
    gan_fake_batch: int = 512  # generated examples per step (fixed: never a function of the data)
    gan_lr: Optional[float] = None  # None: the critic's default
    generator_run: DpdfdOptions = field(default_factory=DpdfdOptions)  # `query_generator` train: its DPDFD options

    def __post_init__(self) -> None:
        checks = [
            (self.k >= 1, "`k` must be >= 1"), (0 < self.sampling_rate <= 1, "`sampling_rate` (γ) must be in (0, 1]"),
            (self.sigma1 > 0, "`sigma1` must be > 0"), (self.sigma2 is None or self.sigma2 > 0, "`sigma2` must be > 0"),
            (self.rounds >= 1, "`rounds` must be >= 1"), (self.queries is None or self.queries >= 1, "`queries` must be >= 1"),
            (self.epochs >= 1, "`epochs` must be >= 1"), (self.labels in LABELS, f"`labels` must be soft or hard, got {self.labels!r}"),
            (self.label_temperature > 0, "`label_temperature` must be > 0"),
            (self.round_features in ROUND_FEATURES, f"`round_features` must be {' or '.join(ROUND_FEATURES)}, got {self.round_features!r}"),
            (self.knn in KNN, f"`knn` must be auto, exact or faiss, got {self.knn!r}"),
            (self.canaries == 0 or self.canaries >= 2, "`canaries` needs at least 2 canaries"),
        ]
        for ok, message in checks:
            if not ok:
                raise DpconvertError(message)
        self.gan_options()  # the GAN's own options check the `gan_*` ones (methods/dpgan.py: GanOptions)

    @property
    def threshold_value(self) -> float:
        return self.threshold if self.threshold is not None else self.threshold_ratio * self.k

    def gan_options(self):
        from .dpgan import GanOptions

        return GanOptions(critic=self.gan_critic, lr=self.gan_lr, fake_batch=self.gan_fake_batch, steps=self.gan_steps,
                          sampling_rate=self.gan_sampling_rate, clip=self.gan_clip, features=self.gan_features,
                          length_scale=self.gan_length_scale, generator_steps=self.gan_generator_steps)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["generator_run"]  # its DPDFD run describes itself in the card's query_generator block
        return d


# The options each DP-GAN critic reads (the others must keep their defaults); GAN_CRITIC_OPTIONS' keys are CRITICS' keys.
GAN_CRITIC_OPTIONS = {"embedding": ("gan_features", "gan_length_scale", "gan_generator_steps"),
                      "dpsgd": ("gan_steps", "gan_sampling_rate", "gan_clip")}
