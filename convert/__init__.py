"""dpconvert: turn a sensitive image classifier into a differentially private student, with a privacy card.

Python API (the CLI is a thin layer over it; see ``api.py`` and docs/python-api.md)::

    import dpconvert
    result = dpconvert.convert("builtin:digits", out="student.onnx", eps=1)
    dpconvert.plan("dpdfd", eps=1, releases=720)
    dpconvert.audit(["models/"], max_eps=2)

Heavy libraries (torch, timm, onnx) are imported inside functions, so ``import dpconvert`` and ``dpconvert --help``
stay fast.
"""

from .api import audit, convert, plan
from .errors import DpconvertError
from .options import RunOptions
from .version import __version__

__all__ = ["DpconvertError", "RunOptions", "__version__", "audit", "convert", "plan", "load_teacher", "load_data",
           "LoadOptions", "DpdfdOptions", "PknnOptions"]


def __getattr__(name: str):
    """The rest of the API on first use (these import torch or register methods)."""
    if name in ("load_teacher", "LoadOptions"):
        from .io import teachers

        return getattr(teachers, name)
    if name == "load_data":
        from .io.data import load_data

        return load_data
    if name == "DpdfdOptions":
        from .methods.dpdfd_options import DpdfdOptions

        return DpdfdOptions
    if name == "PknnOptions":
        from .methods.pknn_options import PknnOptions

        return PknnOptions
    raise AttributeError(f"module 'dpconvert' has no attribute {name!r}")
