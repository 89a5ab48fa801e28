"""What every conversion takes, whatever the method: typed, checked once, with the real defaults here.

Method-specific options live beside their method (``methods/dpdfd_options.py: DpdfdOptions``, ``methods/pknn_options.py:
PknnOptions``). Error messages name parameters in backticks (`batch_size`); the CLI turns them into its flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .accounting.statements import DELTA_CEILING
from .errors import DpconvertError

DEFAULT_EPS = 1.0
# δ when none is given. Record-level methods: 1e-5 (the private set's size is private, so δ cannot be tied to it; δ ≤ 1/n
# is checked on the console only). DPDFD protects teacher answers, whose number B·T is public: its default is tied to
# it (``units_delta``), so the default run never warns that δ exceeds 1/(B·T).
DEFAULT_DELTA = 1e-5


def units_delta(units: int) -> float:
    """The default δ for ``units`` protected units: min(DEFAULT_DELTA, 1/units) rounded down to one significant digit
    (300 000 answers: 3e-06), so δ·units ≤ 1 holds exactly and the card shows a round number."""
    bound = min(DEFAULT_DELTA, 1.0 / max(1, units))
    scale = 10.0 ** math.floor(math.log10(bound))
    return float(f"{math.floor(bound / scale * (1 + 1e-12)) * scale:.1g}")


@dataclass(frozen=True)
class RunOptions:
    method: str = "auto"  # a name in methods.METHODS, or "auto" (Private-kNN with private data, DPDFD otherwise)
    eps: Optional[float] = None  # target ε; DEFAULT_EPS when neither eps nor noise_multiplier is given
    delta: Optional[float] = None  # None: DEFAULT_DELTA, or for DPDFD tied to the protected answers (units_delta)
    allow_large_delta: bool = False  # opt-in for δ above DELTA_CEILING (the card warns and the audit fails it by default)
    noise_multiplier: Optional[float] = None  # DPDFD's σ, instead of calibrating it to eps (ε is then computed)
    seed: int = 0  # everything but the DP noise (queries, student, training order)
    device: str = "cpu"
    student: Optional[str] = None  # a registered student or timm:NAME; default from the input size
    eval_data: Optional[str] = None  # labelled data for the utility block (not covered by the guarantee)
    private_data: Optional[str] = None  # labelled private training data (record-level methods)
    public_data: Optional[str] = None  # unlabelled public images used as queries
    pixel_range: Optional[float] = None  # maximum pixel value of stored non-uint8 data (io/data.py)
    class_names: Optional[tuple[str, ...]] = None  # the class list in label order (named ImageFolder classes; public by statement)
    seeded_noise: bool = False  # opt-in for tests/benchmarks: the noise from `seed` (not secret; the card says so)
    sign_key: Optional[str] = None  # Ed25519 private key: the card is signed before it is written
    force: bool = False  # replace existing outputs (the model, its cards, a saved generator)
    teacher_card: Optional[str] = None  # the teacher's own privacy card (a DP-trained teacher passes its guarantee on)
    trusted_keys: Optional[str] = None  # public keys a teacher card's signature must verify against
    no_privacy: bool = False  # opt-in for a non-private comparison student: σ = 0, ε = ∞ (the card says so; every audit fails it)
    parity_inputs: int = 256  # inputs of the ONNX-vs-torch parity check
    command: Optional[str] = None  # the command line, for the card
    delta_is_default: bool = field(init=False, default=False)  # the user gave no δ: a method may tie it to its units

    def __post_init__(self) -> None:
        if self.no_privacy:
            if self.eps is not None and math.isfinite(self.eps) or self.noise_multiplier not in (None, 0):
                raise DpconvertError("`no_privacy` trains a student without noise (ε = ∞): drop `eps` and `noise_multiplier`")
            object.__setattr__(self, "eps", None)
            object.__setattr__(self, "noise_multiplier", 0.0)
        elif self.eps is not None and math.isinf(self.eps) or self.noise_multiplier == 0:
            raise DpconvertError("ε = ∞ (no noise) is no privacy at all; give a finite `eps`, or `no_privacy` to train a non-private "
                                 "student for comparison (its card says so and every audit fails it)")
        if self.delta is None:
            object.__setattr__(self, "delta", DEFAULT_DELTA)
            object.__setattr__(self, "delta_is_default", True)
        if self.eps is not None and self.noise_multiplier is not None:
            raise DpconvertError("give `eps` (σ is calibrated to it) or `noise_multiplier` (ε is computed from it), not both")
        if self.eps is None and self.noise_multiplier is None:
            object.__setattr__(self, "eps", DEFAULT_EPS)
        if self.eps is not None and not self.eps > 0:
            raise DpconvertError(f"`eps` must be > 0, got {self.eps}")
        if self.noise_multiplier is not None and self.noise_multiplier < 0:
            raise DpconvertError(f"`noise_multiplier` must be >= 0, got {self.noise_multiplier}")
        if not 0 < self.delta < 1:
            raise DpconvertError(f"`delta` must be in (0, 1), got {self.delta}")
        if self.delta > DELTA_CEILING and not self.allow_large_delta:
            raise DpconvertError(f"`delta` {self.delta:g} is above the ceiling {DELTA_CEILING:g} (δ is the chance that the guarantee fails "
                                 f"outright); give `delta` {DELTA_CEILING:g} or less, or `allow_large_delta` to accept it (the card warns "
                                 "and `dpconvert audit` fails it unless its `max_delta` admits it)")
        if self.parity_inputs < 1:
            raise DpconvertError("`parity_inputs` must be >= 1")
        if self.class_names is not None:
            object.__setattr__(self, "class_names", tuple(self.class_names))
            if len(self.class_names) < 2 or len(set(self.class_names)) != len(self.class_names):
                raise DpconvertError("`class_names` must list at least two distinct names in label order")

    def data_format(self) -> dict:
        """How every data set of this run is read (``io.data.load_data``'s keywords): declared, never inferred from the data."""
        return {"pixel_range": self.pixel_range, "class_names": list(self.class_names) if self.class_names else None}


def resolve_device(device: str) -> str:
    if device not in ("cpu", "cuda", "auto") and not device.startswith("cuda:"):
        raise DpconvertError(f"`device` must be cpu, cuda or auto, got {device!r}")
    if device == "auto" or device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return "cuda" if device == "auto" else device
        if device != "auto":
            raise DpconvertError("`device` cuda was asked for but no CUDA device is available; use `device` cpu")
        return "cpu"
    return device
