"""Methods behind a registry, one module each: ``dpdfd`` (query-level, data-free) and ``pknn`` (record-level).

A method is a ``base.Method``: its options dataclass (the real defaults), ``check`` (option combinations, before
anything is loaded), ``run`` (plan → mechanism → student) and the card blocks describing what ran. Adding a method
is adding one module here that ends with ``@register``.
"""

from __future__ import annotations

from dpconvert.errors import DpconvertError

from . import dpdfd, pknn  # noqa: F401  (register the methods)
from .base import METHODS, NOT_COVERED, Method, MethodOutput

__all__ = ["METHODS", "NOT_COVERED", "Method", "MethodOutput", "choose_method"]


def choose_method(run) -> tuple[str, str]:
    """(method, why): ``auto`` means Private-kNN when private data is given, DPDFD otherwise."""
    if run.method == "auto":
        if run.private_data:
            return "pknn", "private data given: record-level Private-kNN"
        if run.public_data:
            return "dpdfd", "no private data: DPDFD (query-level) on augmented public-image queries (not data-free)"
        return "dpdfd", "no private data: data-free DPDFD (query-level)"
    if run.method not in METHODS:
        raise DpconvertError(METHODS.unknown_message(run.method))
    return run.method, "chosen by name"
