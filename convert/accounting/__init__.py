"""Privacy accounting: pure maths (gaussian, screening, dpdfd, pknn), calibration, accountants."""

from .accountant import ACCOUNTANTS, Accountant, DpdfdAccountant, Event, GeneratorPknnAccountant, PknnAccountant, library_versions

__all__ = ["ACCOUNTANTS", "Accountant", "DpdfdAccountant", "GeneratorPknnAccountant", "PknnAccountant", "Event", "library_versions"]
