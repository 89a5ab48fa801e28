"""Methods behind a registry, one module each: ``dpdfd`` (query-level, data-free), ``pknn``, ``dpsgd`` and ``adlm``
(record-level).

A method is a ``base.Method``: its options dataclass (the real defaults), ``check`` (option combinations, before
anything is loaded), ``run`` (plan → mechanism → student), its card name and the card blocks describing what ran.
Adding a method is adding one module that registers it (and its accountant and card check when they are new):
``tests/test_add_a_method.py`` does it from a test module.
"""

from __future__ import annotations

from dpconvert.errors import InternalError

from . import adlm, dpdfd, dpsgd, pknn  # noqa: F401  (register the methods)
from .base import METHODS, NOT_COVERED, Method, MethodOutput

__all__ = ["METHODS", "NOT_COVERED", "Method", "MethodOutput", "choose_method", "data_free_method", "method_order"]


def method_order() -> tuple[str, ...]:
    """The registered methods as help and docs present them (``Method.listed_at``; a method registered from outside the
    package comes after the built-in ones unless it says otherwise)."""
    return tuple(sorted(METHODS.names(), key=lambda name: (METHODS.get(name).listed_at, name)))


def data_free_method() -> str:
    """What runs without private data, and what `dpconvert.plan` plans when no method is named."""
    return next(name for name in method_order() if METHODS.get(name).data_free)


def choose_method(run) -> tuple[str, str]:
    """(method, why): for ``auto``, the method whose rule (``Method.auto_reason``) takes what was given — private data:
    DP-SGD; none: DPDFD (see each rule for the benchmark behind it); by name otherwise."""
    if run.method == "auto":
        for name in method_order():
            reason = METHODS.get(name).auto_reason(run)
            if reason is not None:
                return name, reason
        raise InternalError(f"no registered method takes what was given (private data {bool(run.private_data)}); every rule declined")
    if run.method not in METHODS:
        raise METHODS.unknown(run.method)
    return run.method, f"chosen by name: {METHODS.get(run.method).summary}"
