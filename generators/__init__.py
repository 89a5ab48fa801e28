"""Generator architectures behind a registry (one file per family).

``create_generator(name, spec, ...)`` builds a generator sized from the
classifier's ``InputSpec``. A generator maps latent codes (and optionally
class labels) to images in the classifier's *normalised* input space: it ends
in tanh → pixel range [0, 1] → (pixel − mean) / std.
"""

from __future__ import annotations

from typing import Callable

from dpconvert.registry import Registry

GENERATORS: Registry[Callable] = Registry("generator architecture")

from . import dafl as _dafl  # noqa: E402,F401  (registers its architectures)
from . import random_fields as _random_fields  # noqa: E402,F401


def create_generator(name: str, spec, *, nz: int = 100, conditional: bool = True):
    return GENERATORS.get(name)(spec, nz=nz, conditional=conditional)


# Data-independent, parameter-free query priors (DPDFD's data-free query source, --prior), with how the card names them.
PRIORS = {"random_fields": "random-field prior", "centred_fields": "centred random-field prior"}


def default_prior_name(spec) -> str:
    """Above 16×16 pixels the centred prior (FMNIST ε=1, with the logit adjustment: 50.2 % on two seeds against 41.7 % for
    the plain prior in a simulation; 51.7 / 53.8 / 65.0 % over pipeline seeds 0-2; benchmarks/RESULTS.md §3); the plain
    prior carries the 8×8 digits results (§1)."""
    return "centred_fields" if spec.channels * spec.height * spec.width > 256 else "random_fields"


def default_generator_name(spec) -> str:
    return "dafl"


__all__ = ["GENERATORS", "PRIORS", "create_generator", "default_generator_name", "default_prior_name"]
