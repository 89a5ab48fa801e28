"""The generator registry, the data-independent priors, and how to build one by name."""

from __future__ import annotations

from typing import Callable

from dpconvert.registry import Registry

GENERATORS: Registry[Callable] = Registry("generator architecture")  # each family's module registers into it


def create_generator(name: str, spec, *, nz: int = 100, conditional: bool = True):
    return GENERATORS.get(name)(spec, nz=nz, conditional=conditional)


# Data-independent, parameter-free query priors (DPDFD's data-free query source, `prior`), with how the card names them.
PRIORS = {"random_fields": "random-field prior", "centred_fields": "centred random-field prior"}  # natural_images.py adds its own


def default_prior_name(spec) -> str:
    """Above 16×16 pixels the centred prior (chosen by benchmark on Fashion-MNIST, benchmarks/RESULTS.md); the plain
    prior carries the 8×8 digits results."""
    return "centred_fields" if spec.channels * spec.height * spec.width > 256 else "random_fields"
