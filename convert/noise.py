"""The random stream a DP mechanism draws its noise and Poisson subsamples from.

The proofs behind every ε assume the adversary cannot predict that randomness.
A stream seeded from ``--seed`` makes a run reproducible (the issue's UX), but
the seed is printed on the card, and anyone who knows it can regenerate the
noise and the subsamples. So the card says which kind of stream ran
(``noise_rng``, ``noise_secret``), warns
when it is the seeded one, and ``audit --require-secret-noise`` refuses it.
``--secret-noise`` seeds the stream from OS entropy (``secrets``) and never
writes the seed down (Opacus's ``secure_mode`` plays the same role). The
generator is torch's Mersenne Twister: its 63-bit seed is secret, but it is not
a cryptographic generator (Opacus uses torchcsprng for that).
"""

from __future__ import annotations

import secrets

import torch

SEEDED_WARNING = ("the DP noise and subsampling were drawn from a stream seeded with the seed on this card: anyone who knows it can "
                  "regenerate them, so the ε holds only against an adversary who does not; convert with --secret-noise for a public release")


def mechanism_rng(seed: int, secret: bool, offset: int = 1) -> tuple[torch.Generator, dict]:
    """(generator, the card's ``noise_rng`` / ``noise_secret`` fields): from OS entropy when ``secret``, else from seed + offset."""
    if secret:
        return (torch.Generator().manual_seed(secrets.randbits(63)),
                {"noise_rng": "torch.Generator (CPU) seeded from OS entropy (secrets.randbits(63)); the seed is not recorded", "noise_secret": True})
    return (torch.Generator().manual_seed(seed + offset),
            {"noise_rng": f"torch.Generator (CPU) seeded with {seed + offset} (from --seed; reproducible, not secret)", "noise_secret": False})
