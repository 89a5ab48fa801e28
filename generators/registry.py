"""The generator registry, the data-independent priors, and how to build one by name."""

from __future__ import annotations

from typing import Callable

from dpconvert.registry import Registry

GENERATORS: Registry[Callable] = Registry("generator architecture")  # each family's module registers into it


def create_generator(name: str, spec, *, nz: int = 100, conditional: bool = True):
    return GENERATORS.get(name)(spec, nz=nz, conditional=conditional)


# Data-independent, parameter-free query priors (DPDFD's data-free query source, `prior`), with how the card names them.
PRIORS = {"random_fields": "random-field prior", "centred_fields": "centred random-field prior",
          "mirrored_fields": "centred random-field prior, half of it mirror-symmetric",
          "framed_fields": "centred random-field prior, half of it mirror-symmetric, stretched to fill the frame"}  # natural_images.py adds its own


def default_prior_name(spec) -> str:
    """RGB inputs of at least 32×32 pixels: crops of natural photographs (a published CIFAR-10 model's student agreed
    with it on 32 % of 60 natural images, against 7–12 % with the centred random fields: benchmarks/RESULTS.md, table
    15). Else,
    above 16×16 pixels the framed prior (chosen by benchmark on Fashion-MNIST: 74.5 % against 59.3 % for the centred
    prior in the product on seed 0, and ahead on three seeds in the design simulation, table 15); the plain prior
    carries the 8×8 digits results."""
    if spec.channels == 3 and min(spec.height, spec.width) >= 32:
        return "natural_crops"
    return "framed_fields" if spec.channels * spec.height * spec.width > 256 else "random_fields"
