"""Privacy accounting: pure maths (gaussian, screening, dpdfd, pknn, dpsgd), calibration, accountants."""

from .accountant import (
    ACCOUNTANTS,
    Accountant,
    DpdfdAccountant,
    DpganAccountant,
    DpganDpdfdAccountant,
    DpganPknnAccountant,
    DpsgdAccountant,
    Event,
    GeneratorPknnAccountant,
    LaplaceAccountant,
    PerAnswerDpdfdAccountant,
    DisjointTeachersDpdfdAccountant,
    PknnAccountant,
    library_versions,
)

__all__ = ["ACCOUNTANTS", "Accountant", "DpdfdAccountant", "DpganAccountant", "DpganDpdfdAccountant", "DpganPknnAccountant", "DpsgdAccountant", "Event",
           "GeneratorPknnAccountant", "LaplaceAccountant", "PerAnswerDpdfdAccountant", "DisjointTeachersDpdfdAccountant", "PknnAccountant",
           "library_versions"]
