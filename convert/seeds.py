"""Every random stream a conversion draws from, by name: one table of offsets from the run's `seed`.

Each stream is its own ``torch.Generator`` seeded with ``seed + offset``, so watching progress, drawing canaries or
training a query generator never shifts another stream (and results stay the same under `seed` whatever else is
switched on). The DP noise is not in this table: it is secret by default and comes from the operating system
(``mechanisms/noise.py``); only under `seeded_noise` is it drawn from a stream here (``noise``, or ``dpgan_noise``
for the DP-critic GAN's own mechanism), and then the card says so.
"""

from __future__ import annotations

STREAMS = {
    "training": 0,  # model initialisation, DPDFD's queries and the students' minibatch order (the run's own stream)
    "noise": 1,  # `seeded_noise` only: the DP noise and Poisson subsampling of the method's mechanism
    "canaries": 2,  # Private-kNN's canary records (auditing/canaries.py)
    "queries": 3,  # Private-kNN's query draws (a subset of public images, prior or generator samples)
    "dpgan": 1000,  # the DP-critic GAN's initialisation and training order
    "dpgan_features": 1001,  # its random Fourier frequencies (public)
    "dpgan_noise": 1002,  # `seeded_noise` only: the GAN critic's DP noise
    "holdout": 2000,  # DPDFD's held-out synthetic batch (the operator's progress display only)
    "prior_images": 3000,  # DPDFD's fixed prior images (data-free per-image targets)
    "gan_images": 3001,  # DPDFD's fixed samples of the DP-critic GAN (`generator` dpgan)
    "prior_trial": 3002,  # DPDFD's prior trial: its images (methods/prior_trial.py)
    "prior_trial_views": 3003,  # … and its query stream (the views of them it asks)
}
# Private-kNN's in-run query generator is a whole DPDFD run of its own, seeded with seed + this: its streams sit at
# seed + SUB_RUN_SHIFT + offset, above every stream of the run that starts it
SUB_RUN_SHIFT = 10_000


def seed_of(name: str, seed: int) -> int:
    """The seed of stream ``name`` in a run seeded with ``seed``."""
    return seed + STREAMS[name]


def stream(name: str, seed: int):
    """A fresh ``torch.Generator`` for stream ``name``."""
    import torch

    return torch.Generator().manual_seed(seed_of(name, seed))
