"""Build a student by name: a registered architecture or ``timm:NAME``."""

from __future__ import annotations

from torch import nn

from dpconvert.errors import DpconvertError, OptionError
from dpconvert.io.spec import InputSpec
from dpconvert.registry import Registry

STUDENTS: Registry = Registry("student architecture", param="student")  # each family's module registers into it (students/__init__ imports them)

_SMALL_INPUT_PX = 32


def default_student_name(spec: InputSpec, device: str = "cpu") -> str:
    """DataLens CNN for small inputs (the paper's choice). Larger inputs: on a GPU a small timm ResNet; on a CPU the
    DataLens CNN at ≤ 32 px behind an average-pool (``reduced_cnn``), because a ResNet-18 student at 224 px trains at
    ~16 rows/s on 2 cores, hours for a default conversion (benchmarks/RESULTS.md, the ResNet-34 table)."""
    if max(spec.height, spec.width) <= _SMALL_INPUT_PX and min(spec.height, spec.width) >= 4:
        return "datalens_cnn"
    return "timm:resnet18" if str(device).startswith("cuda") else "reduced_cnn"


def create_student(name: str, spec: InputSpec) -> nn.Module:
    if name.startswith("timm:"):
        return create_timm(name[len("timm:"):], spec, pretrained=False)
    return STUDENTS.get(name)(spec)


def create_timm(name: str, spec: InputSpec, *, pretrained: bool) -> nn.Module:
    import timm

    base = name.split(".")[0]
    if not timm.is_model(base):
        from dpconvert.registry import closest

        close = closest(base, timm.list_models())
        hint = f"did you mean 'timm:{close}'? Otherwise see" if close else "see"
        raise OptionError(f"unknown timm model {name!r}", fix=f"{hint} timm.list_models() for names")
    kwargs = dict(num_classes=spec.num_classes, in_chans=spec.channels)
    try:
        return timm.create_model(name, pretrained=pretrained, **kwargs)
    except RuntimeError as e:
        raise DpconvertError(f"could not create timm model {name!r}: {str(e).splitlines()[0]}", fix="check `num_classes`/`in_chans` match the weights", param="num_classes") from None
