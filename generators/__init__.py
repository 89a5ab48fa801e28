"""Generator architectures behind a registry (one file per family).

``create_generator(name, spec, ...)`` builds a generator sized from the
classifier's ``InputSpec``. A generator maps latent codes (and optionally
class labels) to images in the classifier's *normalised* input space: it ends
in tanh → pixel range [0, 1] → (pixel − mean) / std.
"""

from __future__ import annotations

from . import dafl as _dafl  # noqa: F401  (registers its architectures)
from . import dcgan as _dcgan  # noqa: F401
from . import natural_images as _natural_images  # noqa: F401
from . import prior_mixture as _prior_mixture  # noqa: F401
from . import random_fields as _random_fields  # noqa: F401
from .registry import GENERATORS, PRIORS, create_generator, default_prior_name

__all__ = ["GENERATORS", "PRIORS", "create_generator", "default_prior_name"]
