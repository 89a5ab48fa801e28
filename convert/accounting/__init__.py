"""Privacy accounting: pure maths (gaussian, screening, dpdfd, pknn), calibration, accountants."""

from .accountant import ACCOUNTANTS, Accountant, DpdfdAccountant, Event, PknnAccountant, library_versions

__all__ = ["ACCOUNTANTS", "Accountant", "DpdfdAccountant", "PknnAccountant", "Event", "library_versions"]
