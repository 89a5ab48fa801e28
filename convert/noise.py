"""The random stream a DP mechanism draws its noise and Poisson subsamples from.

The proofs behind every ε assume the adversary cannot predict that randomness.
A stream seeded from ``--seed`` makes a run reproducible (the issue's UX), but
the seed is printed on the card, and anyone who knows it can regenerate the
noise and the subsamples. So the card says which kind of stream ran, warns
when it is the seeded one, and ``audit --require-secret-noise`` refuses it.
``--secret-noise`` seeds the stream from OS entropy (``secrets``) and never
writes the seed down (Opacus's ``secure_mode`` plays the same role). The
generator is torch's Mersenne Twister: its 63-bit seed is secret, but it is not
a cryptographic generator (Opacus uses torchcsprng for that).
"""

from __future__ import annotations

import secrets

import torch

SECRET_MARK = "OS entropy"  # audit looks for it in the card's mechanism.noise_rng
SEEDED_WARNING = ("the DP noise and subsampling were drawn from a stream seeded with the seed on this card: anyone who knows it can "
                  "regenerate them, so the ε holds only against an adversary who does not; convert with --secret-noise for a public release")


def mechanism_rng(seed: int, secret: bool, offset: int = 1) -> tuple[torch.Generator, str]:
    """(generator, description for the card's ``noise_rng``): from OS entropy when ``secret``, else from seed + offset."""
    if secret:
        return (torch.Generator().manual_seed(secrets.randbits(63)),
                f"torch.Generator (CPU) seeded from {SECRET_MARK} (secrets.randbits(63)); the seed is not recorded")
    return torch.Generator().manual_seed(seed + offset), f"torch.Generator (CPU) seeded with {seed + offset} (from --seed; reproducible, not secret)"


def is_secret(noise_rng: str) -> bool:
    return SECRET_MARK in (noise_rng or "")
