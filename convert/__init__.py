"""dpconvert: turn a sensitive image classifier into a differentially private student, with a privacy card.

Python API (the CLI is a thin layer over it; see ``api.py`` and docs/python-api.md)::

    import dpconvert
    result = dpconvert.convert("builtin:digits", out="student.onnx", eps=1)
    dpconvert.plan("dpdfd", eps=1, releases=720)
    dpconvert.audit(["models/"], max_eps=2)
    dpconvert.synthesize("builtin:digits:train", out="synthetic.npz", input_size=(1, 8, 8), num_classes=10, eps=1)

Heavy libraries (torch, timm, onnx) are imported inside functions, so ``import dpconvert`` and ``dpconvert --help``
stay fast.
"""

from .api import audit, convert, plan
from .errors import DpconvertError, InternalError
from .options import RunOptions
from .version import __version__

__all__ = ["DpconvertError", "InternalError", "RunOptions", "__version__", "audit", "convert", "plan", "synthesize", "load_teacher", "load_data",
           "LoadOptions", "DpdfdOptions", "PknnOptions", "DpsgdOptions", "AdlmOptions", "GanOptions"]

_LAZY = {"load_teacher": "io.teachers", "LoadOptions": "io.teachers", "load_data": "io.data", "synthesize": "synth",
         "DpdfdOptions": "methods.dpdfd_options", "PknnOptions": "methods.pknn_options", "DpsgdOptions": "methods.dpsgd",
         "AdlmOptions": "methods.adlm", "GanOptions": "methods.dpgan"}


def __getattr__(name: str):
    """The rest of the API on first use (these import torch or register methods)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'dpconvert' has no attribute {name!r}")
