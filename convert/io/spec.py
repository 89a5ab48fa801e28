"""What a classifier expects as input: shape, normalisation and class count."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from dpconvert.errors import DpconvertError, OptionError


@dataclass(frozen=True)
class InputSpec:
    channels: int
    height: int
    width: int
    num_classes: int
    mean: tuple[float, ...] = field(default=(0.0,))
    std: tuple[float, ...] = field(default=(1.0,))

    def __post_init__(self) -> None:
        for name in ("channels", "height", "width", "num_classes"):
            if getattr(self, name) < 1:
                raise DpconvertError(fix=f"input spec: {name} must be >= 1, got {getattr(self, name)}")
        if self.num_classes < 2:
            raise DpconvertError("input spec: a classifier needs at least 2 classes", fix="fix `num_classes`", param="num_classes")
        object.__setattr__(self, "mean", _per_channel(self.mean, self.channels, "`mean`"))
        object.__setattr__(self, "std", _per_channel(self.std, self.channels, "`std`"))
        if any(s <= 0 for s in self.std):
            raise DpconvertError(fix="input spec: every `std` value must be > 0", param="std")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.channels, self.height, self.width)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "InputSpec":
        return cls(
            channels=int(d["channels"]),
            height=int(d["height"]),
            width=int(d["width"]),
            num_classes=int(d["num_classes"]),
            mean=tuple(float(v) for v in d.get("mean", (0.0,))),
            std=tuple(float(v) for v in d.get("std", (1.0,))),
        )


def _per_channel(values, channels: int, flag: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in values)
    if len(values) == 1:
        return values * channels
    if len(values) != channels:
        raise DpconvertError(f"{flag} has {len(values)} values but the input has {channels} channels", fix=f"give 1 or {channels}")
    return values


def parse_size(text: str) -> tuple[int, int, int]:
    """Parse ``C,H,W`` (as given to --input-size)."""
    try:
        parts = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 1:
        raise OptionError(fix=f"`input_size` must be C,H,W with positive integers (e.g. 1,28,28), got {text!r}", param="input_size")
    return parts  # type: ignore[return-value]


def parse_floats(text: str, param: str) -> tuple[float, ...]:
    try:
        return tuple(float(p) for p in text.split(","))
    except ValueError:
        raise OptionError(fix=f"`{param}` must be comma-separated numbers (e.g. 0.5 or 0.485,0.456,0.406), got {text!r}", param=param) from None
