"""Private-kNN's options: the mechanism (k, γ, σ1, threshold, σ2), the rounds, the student, and the query source with
its own options (a DPDFD-trained or DP-critic GAN query generator)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from dpconvert.option_fields import check_choices, check_ranges, nested, option, to_flat

from .dpdfd_options import DpdfdOptions
from .dpgan import GanOptions

LABELS = ("soft", "hard")
ROUND_FEATURES = ("student", "student+first")
KNN = ("auto", "exact", "faiss")
KNN_SEARCH = "exact k nearest kept records under a fresh per-query Poisson mask (torch, or faiss for large private sets: the same votes)"


@dataclass
class PknnOptions:
    PANEL: ClassVar[str] = "Private-kNN (record-level)"
    k: int = option(300, help="Neighbours voting on each query.", plan=True)
    sampling_rate: float = option(0.1, help="Poisson sampling rate γ: each private record is kept independently with this probability, per "
                                  "query.", plan=True)
    sigma1: float = option(50.0, help="Screening noise σ1.", plan=True)
    # T_thr = threshold_ratio·k unless given. The paper uses 0.6; with σ1=50 and soft labels 0.4 answers more queries and
    # gives the better student on Fashion-MNIST (benchmarks/RESULTS.md).
    threshold: Optional[float] = option(None, help="Screening threshold T_thr on the noisy top vote count.", default_text="0.4·k", plan=True)
    threshold_ratio: float = option(0.4, help="T_thr / k when `threshold` is not given.", cli=False)
    sigma2: Optional[float] = option(None, help="Noisy-argmax noise σ2.", default_text="calibrated to `eps`", plan=True)
    rounds: int = option(2, help="Rounds; the student's features refine the kNN space of the next.")
    queries: Optional[int] = option(None, help="Queries over all rounds.", default_text="every public image, or 5000 from a generator or "
                                    "the prior", plan=True)
    features: str = option("hog_pca", help="First-round features: hog_pca, hog, or timm:NAME[@FILE] (a public pretrained backbone; FILE = "
                           "local weights).")
    epochs: int = option(40, help="Student epochs per round.")
    student_lr: float = option(2e-3, help="The student's Adam step.", cli=False)
    minibatch: int = option(128, help="The student's minibatch.", cli=False)
    chunk: int = option(256, help="Queries per distance block (memory bound: chunk × n floats).", cli=False)
    knn: str = option("auto", help="kNN search: exact (torch), faiss (optional extra, for ≥1M records) or auto.", choices=KNN)
    # Student targets from the released noisy vote histogram: "hard" = its argmax (the paper), "soft" = softmax(h̃ / (t·σ2))
    # with t = label_temperature. The Gaussian argmax is post-processing of the noisy histogram, so both cost the same ε.
    labels: str = option("soft", help="Student targets from the released noisy vote histogram: soft (tempered softmax) or hard (argmax). "
                         "Same ε.", choices=LABELS)
    label_temperature: float = option(1.0, help="Soft labels: softmax(h̃ / (t·σ2)).", cli=False)
    # φ after round 1: the student's features beside the first map (weight 0.5 on the student's part), or alone
    round_features: str = option("student+first", help="φ after round 1: student (the student's features alone) or student+first (beside the first map).", choices=ROUND_FEATURES, cli=False)
    round_features_weight: float = option(0.5, help="Weight of the student's part of φ beside the first map.", cli=False)
    balance: bool = option(True, help="Class-balanced loss over the answered labels.", cli=False)
    canaries: int = option(0, help="One-run canary audit with N canaries (an empirical ε lower bound on the card).")
    query_generator: Optional[str] = option(None, help="Queries from a generator FILE saved with `save_generator` (its cost is composed in), "
                                            "train (DPDFD trains one in this run), dpgan (a GAN with a DP critic trained on `private_data` in "
                                            "this run: record-level) or prior (data-independent).", plan=True)
    generator_eps: Optional[float] = option(None, help="With `query_generator` train or dpgan: the generator's share of `eps`; the rest "
                                            "labels the queries.", default_text="half", plan=True)
    gan: GanOptions = nested(GanOptions, prefix="gan", panel="Private-kNN: DP-critic GAN queries (`query_generator` dpgan)",
                             help="`query_generator` dpgan: the DP-critic GAN trained on the private data (methods/dpgan.py)")
    generator_run: DpdfdOptions = option(default_factory=DpdfdOptions, help="`query_generator` train: its DPDFD options (given flat: "
                                         "`releases`, `batch_size`, `generator`, `prior`, …)", cli=False)

    def __post_init__(self) -> None:
        checks = [
            (self.k >= 1, "k", "must be >= 1"), (0 < self.sampling_rate <= 1, "sampling_rate", "(γ) must be in (0, 1]"),
            (self.sigma1 > 0, "sigma1", "must be > 0"), (self.sigma2 is None or self.sigma2 > 0, "sigma2", "must be > 0"),
            (self.rounds >= 1, "rounds", "must be >= 1"), (self.queries is None or self.queries >= 1, "queries", "must be >= 1"),
            (self.epochs >= 1, "epochs", "must be >= 1"), (self.label_temperature > 0, "label_temperature", "must be > 0"),
            (self.canaries == 0 or self.canaries >= 2, "canaries", "needs at least 2 canaries"),
        ]
        check_choices(self)
        check_ranges(checks)

    @property
    def threshold_value(self) -> float:
        return self.threshold if self.threshold is not None else self.threshold_ratio * self.k

    def to_dict(self) -> dict:
        d = to_flat(self)  # flat names (`gan_critic`, …), as the options are given
        del d["generator_run"]  # its DPDFD run describes itself in the card's query_generator block
        return d
