"""Methods behind a registry, one module each: ``dpdfd`` (query-level, data-free) and ``pknn`` (record-level).

A method is a ``base.Method``: its options dataclass (the real defaults), ``check`` (option combinations, before
anything is loaded), ``run`` (plan → mechanism → student), its card name and the card blocks describing what ran.
Adding a method is adding one module that registers it (and its accountant and card check when they are new):
``tests/test_add_a_method.py`` does it from a test module.
"""

from __future__ import annotations

from dpconvert.errors import OptionError

from . import adlm, dpdfd, dpsgd, pknn  # noqa: F401  (register the methods)
from .base import METHODS, NOT_COVERED, Method, MethodOutput

__all__ = ["DATA_FREE_METHOD", "METHODS", "METHOD_ORDER", "NOT_COVERED", "Method", "MethodOutput", "choose_method"]

# how help and docs present the methods: the data-free one the product is named for, then the record-level ones by
# what they need (private data + queries, private labels); a test keeps it equal to the registry
METHOD_ORDER = ("dpdfd", "pknn", "dpsgd", "adlm")
DATA_FREE_METHOD = METHOD_ORDER[0]  # what runs without private data, and what `dpconvert.plan` plans when no method is named


def choose_method(run) -> tuple[str, str]:
    """(method, why) for ``auto``, from what was given and the benchmark table (benchmarks/RESULTS.md).

    Private data (with or without public queries): DP-SGD on ScatterNet features when they are small enough to keep per record
    (``dpsgd.SCATTER_MAX_FEATURES``), end to end above
    (Fashion-MNIST, record-level ε = 1: 88.6 % against Private-kNN's 82.2 % on the same private data plus 5 000 public
    queries), so bringing public images never lowers accuracy; ``method`` pknn uses them. No private data: DPDFD.
    """
    if run.method == "auto":
        if run.private_data and run.public_data:
            return "dpsgd", ("private data given: record-level DP-SGD on the private labels, the best measured method (Fashion-MNIST, "
                             "ε = 1: 88.6 % against 82.2 % for Private-kNN labelling the public queries); the public queries are not "
                             "used: `method` pknn uses them")
        if run.private_data:
            return "dpsgd", ("private data given, no public queries: record-level DP-SGD on the private labels (the best measured method, "
                             "88 % vs Private-kNN's 82 % on Fashion-MNIST at ε = 1)")
        if run.public_data:
            return "dpdfd", "no private data: DPDFD (query-level) on augmented public-image queries (not data-free)"
        return "dpdfd", "no private data: data-free DPDFD (query-level)"
    if run.method not in METHODS:
        raise OptionError(METHODS.unknown_message(run.method))
    return run.method, f"chosen by name: {METHODS.get(run.method).summary}"
