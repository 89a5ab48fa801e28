"""Training a GAN with a differentially private critic on the private records: the record-level query source of
Private-kNN (``query_generator="dpgan"``) and the model of ``dpconvert synth``.

"Generating Artificial Data for Private Deep Learning" (Triastcyn & Faltings) makes the critic the only part of a
GAN that touches private records, so that the generator is private by post-processing. Two critics, a registry:

- ``embedding`` (default): the critic is the witness of a kernel two-sample test whose private part, the noisy
  class-conditional mean embedding of the records, is released once (``mechanisms/dp_mean_embedding.py``);
- ``dpsgd``: a convolutional critic trained with DP-SGD, one Poisson-subsampled Gaussian event per step
  (``mechanisms/dp_gan.py``).

Fashion-MNIST, record-level ε ≤ 1 with the Private-kNN labels (RESULTS table 4): the embedding critic's queries
gave the better student, which is why it is the default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, ClassVar, Optional

from dpconvert.option_fields import check_choices, check_ranges, option

from dpconvert.registry import Registry
from dpconvert.seeds import seed_of, stream

DPGAN_GENERATOR = "dcgan_small"


@dataclass(frozen=True)
class GanOptions:
    """The DP-critic GAN's options: `dpconvert synth`'s, and Private-kNN's `gan_*` (``PknnOptions.gan``)."""

    PANEL: ClassVar[str] = "DP-critic GAN"
    critic: str = option("embedding", help="The DP critic: embedding (one noisy kernel mean-embedding release of the records) or dpsgd "
                         "(a convolutional critic trained with DP-SGD).", choices=("embedding", "dpsgd"), plan=True)
    lr: Optional[float] = option(None, help="Generator (and critic) Adam step.", default_text="the critic's", cli=False)
    fake_batch: int = option(512, help="Generated examples per step (fixed: never a function of the data).", cli=False)
    # critic "dpsgd"
    steps: int = option(1000, help="DP critic steps, each one noisy DP-SGD step on a Poisson lot.", only_with=("critic", "dpsgd"), plan=True)
    sampling_rate: float = option(0.02, help="Poisson rate q of the critic's lots.", only_with=("critic", "dpsgd"), plan=True)
    clip: float = option(1.0, help="Per-example gradient norm bound of the critic.", only_with=("critic", "dpsgd"), cli=False)
    # critic "embedding"
    features: int = option(3000, help="Random Fourier frequencies: 2·features + 1 released numbers per class.", only_with=("critic", "embedding"),
                           cli=False)
    length_scale: float = option(0.2, help="The Gaussian kernel's length scale in units of √(input dimensions), on [0, 1] pixels.",
                                 only_with=("critic", "embedding"), cli=False)
    generator_steps: int = option(1500, help="Generator steps against the one release (post-processing: free).", only_with=("critic", "embedding"))

    def __post_init__(self) -> None:
        """The one place the GAN's options are checked (Private-kNN's `gan_*` and `dpconvert synth` both build these)."""
        check_choices(self, "gan_")
        checks = [(self.steps >= 1, "gan_steps", "must be >= 1"), (0 < self.sampling_rate < 1, "gan_sampling_rate", "must be in (0, 1)"),
                  (self.clip > 0, "gan_clip", "must be > 0"), (self.fake_batch >= 1, "gan_fake_batch", "must be >= 1"),
                  (self.lr is None or self.lr > 0, "gan_lr", "must be > 0"), (self.features >= 1, "gan_features", "must be >= 1"),
                  (self.length_scale > 0, "gan_length_scale", "must be > 0"), (self.generator_steps >= 1, "gan_generator_steps", "must be >= 1")]
        check_ranges(checks)


@dataclass
class DpganResult:
    generator: object
    accountant_state: dict
    epsilon: float
    mechanism: dict


@dataclass(frozen=True)
class Critic:
    """How one critic calibrates σ to (ε, δ), builds its training and describes itself on the card."""

    sigma: Callable[[GanOptions, float, float], float]
    build: Callable[..., object]
    mechanism: Callable[[GanOptions, object], dict]
    progress_steps: Callable[[GanOptions], int]  # the steps ``on_step`` counts
    default_lr: float  # when GanOptions.lr is None
    planned: Callable[[GanOptions], dict]  # the (clip, sampling_rate, count) of the events one training records


CRITICS: Registry[Critic] = Registry("GAN critic", param="critic")


def _dpsgd_build(opts, spec, generator, sigma, accountant, noise, train_rng, seed):
    from dpconvert.mechanisms.dp_gan import DpGanTraining

    return DpGanTraining(generator, spec, sigma=sigma, clip=opts.clip, sampling_rate=opts.sampling_rate, steps=opts.steps,
                         fake_batch=opts.fake_batch, lr=opts.lr, accountant=accountant, noise=noise, train_rng=train_rng)


CRITICS.register("dpsgd")(Critic(
    sigma=lambda o, eps, delta: _calibrate(eps, delta, o.sampling_rate, o.steps),
    build=_dpsgd_build,
    mechanism=lambda o, acc: {"clip": o.clip, "sampling_rate": o.sampling_rate, "steps": acc.count("subsampled_gaussian"),
                              "engine": "opacus ghost clipping (DPOptimizerFastGradientClipping) on a convolutional critic"},
    progress_steps=lambda o: o.steps, default_lr=2e-4,
    planned=lambda o: {"clip": o.clip, "sampling_rate": o.sampling_rate, "count": o.steps}))


def _embedding_build(opts, spec, generator, sigma, accountant, noise, train_rng, seed):
    import math

    from dpconvert.mechanisms.dp_mean_embedding import EmbeddingGanTraining

    return EmbeddingGanTraining(generator, spec, sigma=sigma, features=opts.features, length_scale=opts.length_scale * math.sqrt(math.prod(spec.shape)),
                                steps=opts.generator_steps, fake_batch=opts.fake_batch, lr=opts.lr, accountant=accountant,
                                noise=noise, train_rng=train_rng, feature_seed=seed_of("dpgan_features", seed))


CRITICS.register("embedding")(Critic(
    sigma=lambda o, eps, delta: _calibrate(eps, delta, 1.0, 1),
    build=_embedding_build,
    mechanism=lambda o, acc: {"clip": 1.0, "sampling_rate": 1.0, "steps": acc.count("subsampled_gaussian"), "features": o.features,
                              "length_scale": o.length_scale, "generator_steps": o.generator_steps,
                              "engine": "one Gaussian release of the class-conditional random-Fourier-feature mean embedding "
                                        "(ℓ2 sensitivity 1 per record), the generator fitted to it"},
    progress_steps=lambda o: o.generator_steps, default_lr=1e-3,
    planned=lambda o: {"clip": 1.0, "sampling_rate": 1.0, "count": 1}))


def _calibrate(eps: float, delta: float, sampling_rate: float, steps: int) -> float:
    from dpconvert.accounting.calibrate import dpsgd_sigma

    return dpsgd_sigma(eps=eps, delta=delta, sampling_rate=sampling_rate, steps=steps, count_sigma=None)


def planned_events(opts: GanOptions, eps: float, delta: float) -> list:
    """The events a training at (ε, δ) will record, before any data is read: to check a composed budget up front."""
    from dpconvert.accounting import DpganAccountant

    critic = CRITICS.get(opts.critic)
    acc = DpganAccountant()
    acc.record("subsampled_gaussian", sigma=critic.sigma(opts, eps, delta), **critic.planned(opts))
    return list(acc.events)


def train_dpgan(ctx, opts: GanOptions, spec, eps: float, delta: float, on_progress=None) -> DpganResult:
    """Calibrate the critic's σ to (ε, δ) and train on ``ctx.private`` (opened by the kernel, per record), with the GAN's
    own noise stream; nothing else reads the records."""
    import torch

    from dpconvert.accounting import DpganAccountant
    from dpconvert.generators import create_generator
    from dpconvert.mechanisms.dp_gan import fit_on_private

    critic = CRITICS.get(opts.critic)
    opts = replace(opts, lr=opts.lr or critic.default_lr)
    sigma = critic.sigma(opts, eps, delta)
    run = ctx.run
    torch.manual_seed(seed_of("dpgan", run.seed))
    generator = create_generator(DPGAN_GENERATOR, spec, nz=64)
    noise = ctx.noise_for("dpgan_noise")  # its own stream: under seeded noise, not the training stream nor the labels' noise
    accountant = DpganAccountant()
    total = critic.progress_steps(opts)
    every = max(1, total // 10)

    def report(step, loss_d, loss_g):
        if on_progress and step % every == 0:
            on_progress({"kind": "query_generator", "stage": f"DP-critic GAN ({opts.critic})", "epsilon_share": eps, "delta": delta, "releases": step,
                         "total": total, "loss": loss_d})
    training = critic.build(opts, spec, generator, sigma, accountant, noise, stream("dpgan", run.seed), run.seed)
    trained = fit_on_private(training, ctx.private, report)
    mechanism = {"critic": opts.critic, "sigma": sigma, **critic.mechanism(opts, accountant), "fake_batch": opts.fake_batch, **noise.card_fields}
    return DpganResult(trained, accountant.state_dict(), accountant.epsilon(delta=delta), mechanism)


def gan_query_source(gan, n: int, spec, seed: int):
    """DPDFD's `generator` dpgan queries: (source, card description) of n fixed samples of the trained GAN
    (class-balanced, from the seed), queried as views like public images."""
    from dpconvert.generators.public_images import PublicImageSource
    from dpconvert.generators.saved import sample_queries

    images = sample_queries(gan.generator, n, spec.num_classes, stream("gan_images", seed))
    return (PublicImageSource(images, mix_prob=0.0, public=False),
            f"{n} samples of a GAN with a DP critic ({gan.mechanism['critic']}) trained on the private data in this run, views under "
            "sub-pixel shifts and flips; the released targets averaged per image and denoised — not data-free")


def gan_card_info(gan, samples: int, delta: float) -> dict:
    """The card's `mechanism.query_generator` for a GAN trained in this run: what it is and what it cost."""
    return {"trained_in_this_run": True, "architecture": f"{DPGAN_GENERATOR} generator, DP critic ({gan.mechanism['critic']})",
            "samples": samples, "dpgan_epsilon_at_its_delta": gan.epsilon, "its_delta": delta, "dpgan": gan.mechanism}
