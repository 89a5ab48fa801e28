"""Privacy accounting: pure maths (gaussian, screening, dpdfd, pknn), calibration, accountants."""

from .accountant import ACCOUNTANTS, Accountant, DpdfdAccountant, DpsgdAccountant, Event, GeneratorPknnAccountant, LaplaceAccountant, PknnAccountant, library_versions

__all__ = ["ACCOUNTANTS", "Accountant", "DpdfdAccountant", "DpsgdAccountant", "GeneratorPknnAccountant", "LaplaceAccountant", "PknnAccountant", "Event", "library_versions"]
