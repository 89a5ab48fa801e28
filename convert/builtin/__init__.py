"""Teachers shipped inside the package (no downloads): ``builtin:NAME``."""

from __future__ import annotations

from pathlib import Path

from dpconvert.registry import Registry

_HERE = Path(__file__).parent

BUILTIN_TEACHERS: Registry[Path] = Registry("built-in teacher", param="teacher")
BUILTIN_TEACHERS.register("digits")(_HERE / "digits_teacher.safetensors")
