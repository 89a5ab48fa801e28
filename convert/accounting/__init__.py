"""Privacy accounting: pure maths (gaussian, screening, dpdfd, pknn, dpsgd), calibration, accountants."""

from .accountant import (
    ACCOUNTANTS,
    Accountant,
    DpdfdAccountant,
    DpganAccountant,
    DpsgdAccountant,
    Event,
    LaplaceAccountant,
    PerAnswerDpdfdAccountant,
    DisjointTeachersDpdfdAccountant,
    PknnAccountant,
    library_versions,
)
from .composed import ComposedAccountant, Composition, DpganDpdfdAccountant, DpganPknnAccountant, GeneratorPknnAccountant, compose

__all__ = ["ACCOUNTANTS", "Accountant", "ComposedAccountant", "Composition", "compose", "DpdfdAccountant", "DpganAccountant", "DpganDpdfdAccountant", "DpganPknnAccountant", "DpsgdAccountant", "Event",
           "GeneratorPknnAccountant", "LaplaceAccountant", "PerAnswerDpdfdAccountant", "DisjointTeachersDpdfdAccountant", "PknnAccountant",
           "library_versions"]
