"""dpconvert: turn a sensitive image classifier into a differentially private student.

The Python API mirrors the CLI: ``load_teacher`` (teachers), ``load_data``
(data readers), ``dpconvert.accounting`` (ε maths), ``convert`` (the main job).
Heavy libraries (torch, timm, onnx) are imported inside functions so that
``import dpconvert`` and ``dpconvert --help`` stay fast.
"""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("dpconvert")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

from .errors import DpconvertError  # noqa: E402

__all__ = ["DpconvertError", "__version__"]
