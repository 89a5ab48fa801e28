"""What every conversion takes, whatever the method: typed, checked once, with the real defaults here.

Method-specific options live beside their method (``methods/dpdfd.py: DpdfdOptions``, ``methods/pknn.py:
PknnOptions``). Error messages name parameters in backticks (`batch_size`); the CLI turns them into its flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import DpconvertError

DEFAULT_EPS = 1.0
DEFAULT_DELTA = 1e-5


@dataclass(frozen=True)
class RunOptions:
    method: str = "auto"  # a name in methods.METHODS, or "auto" (Private-kNN with private data, DPDFD otherwise)
    eps: Optional[float] = None  # target ε; DEFAULT_EPS when neither eps nor noise_multiplier is given
    delta: float = DEFAULT_DELTA
    noise_multiplier: Optional[float] = None  # DPDFD's σ, instead of calibrating it to eps (ε is then computed)
    seed: int = 0  # everything but the DP noise (queries, student, training order)
    device: str = "cpu"
    student: Optional[str] = None  # a registered student or timm:NAME; default from the input size
    eval_data: Optional[str] = None  # labelled data for the utility block (not covered by the guarantee)
    private_data: Optional[str] = None  # labelled private training data (record-level methods)
    public_data: Optional[str] = None  # unlabelled public images used as queries
    pixel_range: Optional[float] = None  # maximum pixel value of stored non-uint8 data (io/data.py)
    seeded_noise: bool = False  # opt-in for tests/benchmarks: the noise from `seed` (not secret; the card says so)
    sign_key: Optional[str] = None  # Ed25519 private key: the card is signed before it is written
    parity_inputs: int = 256  # inputs of the ONNX-vs-torch parity check
    command: Optional[str] = None  # the command line, for the card

    def __post_init__(self) -> None:
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
        if self.parity_inputs < 1:
            raise DpconvertError("`parity_inputs` must be >= 1")


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
