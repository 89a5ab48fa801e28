"""Student architectures behind a registry (one file per family).

``create_student(name, spec)`` builds a freshly initialised classifier for an
``InputSpec``; ``timm:NAME`` builds any timm model with the spec's channels and
classes. Every student exposes ``forward_features(x)`` (pooled features before
the classifier, used by the generator's activation term) and ``forward_head``.
"""

from __future__ import annotations

from . import cnn as _cnn  # noqa: F401  (registers its architectures)
from . import reduced as _reduced  # noqa: F401
from . import scatternet as _scatternet  # noqa: F401
from .factory import STUDENTS, create_student, default_student_name

__all__ = ["STUDENTS", "create_student", "default_student_name"]
