"""The random stream a DP mechanism draws its noise and Poisson subsamples from.

The proofs behind every ε assume the adversary cannot predict that randomness.
So by default the stream is **secret**: torch's CPU generator (Mersenne Twister,
MT19937) with its whole 624-word state filled from the operating system's
entropy (``os.urandom``: 19 968 bits, far above the 128 bits asked for), and
that state is written nowhere. ``torch.Generator.manual_seed`` would take only
64 bits, so the state is set directly (``set_state``) and read back to check.

Why MT19937 is adequate here: its outputs are predictable only from its state
or from about 624 consecutive raw outputs, and no raw output ever leaves the
mechanism: what is published are noisy sums (teacher rows + noise, votes +
noise), the screening bits and the student trained on them. A cryptographic
generator would also resist an adversary who sees raw draws, which is not this
threat model (Opacus uses torchcsprng for its ``secure_mode`` for the same
purpose). Known limit, shared with every floating-point DP library: Gaussian
samples are floating-point numbers, not exact reals (Mironov 2012 showed
attacks on naive floating-point Laplace noise); dpconvert does not use a
discrete or snapping mechanism.

``--seeded-noise`` (tests, benchmarks, reproducibility studies) draws the same
stream from ``--seed`` instead. Anyone who reads that seed on the card can
regenerate the noise and subtract it, so such a card says so (``noise_secret:
false`` and a warning), and ``dpconvert audit`` fails it unless the policy
allows seeded noise (``--allow-seeded-noise``).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import torch

from dpconvert.accounting.statements import SEEDED_WARNING  # noqa: F401  (the card's text; the audit requires it)

SECRET_RNG = ("torch CPU Mersenne Twister (MT19937) whose whole 19 968-bit state was filled from os.urandom; "
              "the state is not recorded anywhere")

# torch's CPU generator state (CPUGeneratorImplStateLegacy): uint64 initial seed, int32 left, int32 seeded,
# uint64 next, then uint64 state[624] holding the 32-bit MT words.
_MT_WORDS = 624
_STATE_OFFSET = 24


def secret_generator() -> torch.Generator:
    """A CPU generator whose MT19937 state comes entirely from os.urandom (never from a seed)."""
    g = torch.Generator()
    state = bytearray(g.get_state().numpy().tobytes())
    words = struct.unpack(f"<{_MT_WORDS}I", os.urandom(4 * _MT_WORDS))
    if not any(words):  # the all-zero state is MT's one degenerate state (probability 2^-19968)
        return secret_generator()
    struct.pack_into("<QiiQ", state, 0, 0, 1, 1, 0)  # initial seed 0 (none was used), left 1 → re-twist on first draw
    struct.pack_into(f"<{_MT_WORDS}Q", state, _STATE_OFFSET, *words)
    g.set_state(torch.frombuffer(state, dtype=torch.uint8).clone())
    back = struct.unpack_from(f"<{_MT_WORDS}Q", g.get_state().numpy().tobytes(), _STATE_OFFSET)
    if tuple(back) != words:  # torch changed its state layout: refuse rather than run with a guessable stream
        raise RuntimeError("could not set the secret noise generator's state (torch's generator layout changed); "
                           "this dpconvert does not support this torch version")
    return g


def mechanism_rng(seed: int, *, seeded: bool = False, stream: str = "noise") -> tuple[torch.Generator, dict]:
    """(generator, the card's ``noise_rng`` / ``noise_secret`` fields): secret by default; with ``seeded``, the named
    stream of ``seeds.STREAMS`` (``noise``, or ``dpgan_noise`` for the DP-critic GAN)."""
    if not seeded:
        return secret_generator(), {"noise_rng": SECRET_RNG, "noise_secret": True}
    from dpconvert.seeds import seed_of

    return (torch.Generator().manual_seed(seed_of(stream, seed)),
            {"noise_rng": f"torch CPU generator seeded with {seed_of(stream, seed)} (`seeded_noise`: from `seed`; reproducible, NOT secret)",
             "noise_secret": False})


@dataclass
class NoiseStream:
    """The random stream one mechanism draws its DP noise and Poisson subsamples from, with what the card says of it
    (``card_fields``: ``noise_rng``, ``noise_secret``) and the warning a seeded stream carries. Built once per run by
    ``noise_stream``; only the privacy kernel (``convert/mechanisms/``) draws from ``generator``."""

    generator: torch.Generator
    card_fields: dict
    warnings: list = field(default_factory=list)
    seeded: bool = False


def noise_stream(seed: int, *, seeded: bool = False, stream: str = "noise") -> NoiseStream:
    generator, fields = mechanism_rng(seed, seeded=seeded, stream=stream)
    return NoiseStream(generator, fields, [SEEDED_WARNING] if seeded else [], seeded)


def as_generator(noise) -> torch.Generator:
    """A mechanism's noise argument: a ``NoiseStream``, or a bare generator (tests that build a mechanism directly)."""
    return noise.generator if isinstance(noise, NoiseStream) else noise
