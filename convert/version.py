"""The installed version (its own module, so that nothing has to import the package root for it)."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("dpconvert")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
