"""The DPDFD engine's settings: release (T, B, σ, C), query source, student and generator training."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional


@dataclass(kw_only=True)
class DpdfdConfig:
    """The engine's settings. The ones a user sets are required here: their one default is the option's
    (``methods/dpdfd_options.DpdfdOptions``, resolved for the teacher by ``engine_option_settings``); the rest are the
    engine's own, each what a default conversion runs."""

    # the user's options, resolved (methods/dpdfd_options.engine_option_settings): no default here
    releases: int  # T: noisy releases (accountant events)
    batch_size: int  # B: rows per release
    clip: float  # C: row norm after normalisation
    # L_T (mechanisms/output_gradients.py: DISTILL_LOSSES): "logits" (centred logit matching; default, chosen by
    # benchmark: benchmarks/RESULTS.md, table 1), "ce" on the teacher argmax (the paper's choice) or "kd" (soft
    # probabilities at kd_temperature)
    distill_loss: str
    # logit adjustment after training (post-processing): subtract the student's mean logits over the released queries
    # from its head bias, so the query set's class mix is not kept as a prior on real inputs (Menon et al. 2021)
    logit_adjust: bool
    student_lr: float  # peak of the cosine schedule
    prior_pool: int  # after the first release, draw pool×n prior samples and keep a class-balanced, student-confident n
    # "sources" with several releases: each release queries views of this many source images no release queried yet,
    # those the student trained on the earlier releases is least sure about (uncertainty sampling: post-processing, and
    # per-answer accounting keeps the ε of one release); 0: every release queries views of every source image. Measured
    # on Fashion-MNIST (benchmarks/RESULTS.md, table 12): 4 × 625 of 20 000 prior images 61.3 % against 56.0 % for
    # today's default (seed 0); picking them class-balanced by the student's predictions lost (52.7 %) and was removed
    new_sources_per_release: int
    # "sources", after the last release: a first student on the averaged targets, each target shrunk towards that
    # student's answer (source_targets.shrink_towards), and the student trained again from its initial weights
    shrink_to_student: bool
    sigma: float = 0.0  # noise multiplier (std σ·C per entry): the plan's
    target_step: float = 5.0  # γ in y_s = s − γ·g̃ (Algorithm 1 line 10)
    score_scale: float = 5.0  # λ: logit gap the clean score target corresponds to (ce)
    kd_temperature: float = 4.0
    student_epochs: int = 8  # replay passes over the whole buffer after each release, on a cosine schedule
    minibatch: int = 2048
    generator_steps: int = 100  # generator updates per round (student as fixed discriminator)
    generator_lr: float = 1e-3
    gen_batch: int = 256
    loss_ce: float = 1.0  # L_G: CE(student(G(z,c)), c) (argmax of the student for unconditional G)
    loss_balance: float = 1.0  # α: Σ p̄ log p̄ (class balance)
    loss_activation: float = 0.1  # β: −‖f_s(x)‖ (activation term)
    prior_fraction: float = 1.0  # share of each release drawn from the data-independent prior (0.5 beside a learned generator)
    # what the student learns from: "rows" replays every released (x, y_s) pair; "sources" (queries that are views of
    # source images, e.g. public images) averages the released targets per source image, denoises them
    # (source_targets.DENOISERS) and trains on fresh views of the images (distill/source_targets.py)
    student_data: str = "rows"
    denoise: str = "bayes"
    # "rows", after the last round: the classifier refitted by ridge regression on every released row, its penalty chosen
    # by Stein's unbiased risk estimate (post-processing; StudentTrainer.refit_head), where the rows are many enough for
    # the features (head_refit_applies)
    head_refit: bool = True
    student_samples: int = 400_000  # "sources": views the student trains on in all (epochs over the images follow from it)
    source_minibatch: int = 256  # "sources": images per student step (loss: cross-entropy to the softmax of each target)
    amp: Optional[str] = None  # "bf16": teacher and student forward under bf16 autocast; the release stays fp32
    image_buffer_bytes: int = 2**30  # keep released inputs as images up to this size, else as the prior's z (re-rendered)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.student_data not in ("rows", "sources"):
            raise ValueError(f"student_data must be 'rows' or 'sources', got {self.student_data!r}")
        if self.amp not in (None, "bf16"):
            raise ValueError(f"amp must be None or 'bf16', got {self.amp!r}")

    @property
    def student_target(self) -> str:
        """"score": MSE to the label scores decoded from the CE release; "centred": the released y_s, compared
        shift-invariantly (the noise's common shift is not fitted)."""
        return "score" if self.distill_loss == "ce" else "centred"

    def target_noise_var(self) -> float:
        """(γσC)²: the noise variance of each entry of a released target y_s = s − γ·g̃ (g̃ carries N(0, σ²C²) per entry).
        A method, not a property: the card's config lists the properties (to_dict), and this one follows from γ, σ, C."""
        return (self.target_step * self.sigma * self.clip) ** 2

    @property
    def zero_head(self) -> bool:
        """Zero the student's classifier first, so the first release is taken at s = 0 (not for the CE release)."""
        return self.distill_loss != "ce"

    def to_dict(self) -> dict:
        return {**asdict(self), "student_target": self.student_target, "zero_head": self.zero_head}


@dataclass
class RoundInfo:
    round: int
    releases: int
    student_loss: float
    generator_loss: float
    seconds: float
    times: dict
