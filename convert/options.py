"""What every conversion takes, whatever the method: typed, checked once, with the real defaults here.

Method-specific options live beside their method (``methods/dpdfd_options.py: DpdfdOptions``, ``methods/pknn_options.py:
PknnOptions``). Error messages name parameters in backticks (`batch_size`); the CLI turns them into its flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from .accounting.statements import DELTA_CEILING
from .errors import OptionError
from .option_fields import DATA, OUTPUT, PRIVACY, TEACHER, option

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


def _parse_class_names(text: str) -> tuple:
    from .io.data import parse_class_names

    return tuple(parse_class_names(text))


@dataclass(frozen=True)
class RunOptions:
    PANEL: ClassVar[str] = PRIVACY
    method: str = option("auto", help="A registered method, or auto (DP-SGD with `private_data`, DPDFD otherwise).")
    eps: Optional[float] = option(None, help="Target ε; the noise is calibrated to it.", default_text=f"{DEFAULT_EPS:g} unless `noise_multiplier`",
                                  plan=True)
    delta: Optional[float] = option(None, help=f"Target δ, at most {DELTA_CEILING:g} unless `allow_large_delta`.",
                                    default_text=f"DPDFD: ≤ 1/(B·T), one over the protected teacher answers; other methods {DEFAULT_DELTA:g}",
                                    plan=True)
    allow_large_delta: bool = option(False, help=f"Accept a δ above {DELTA_CEILING:g} (the card warns; the audit fails it unless its "
                                     "`max_delta` admits it).")
    noise_multiplier: Optional[float] = option(None, help="DPDFD's and DP-SGD's noise multiplier σ instead of calibrating it to `eps`; ε is "
                                               "computed.", plan=True)
    seed: int = option(0, help="Seed for everything but the DP noise (queries, student, training order); the noise is secret unless "
                       "`seeded_noise`.")
    device: str = option("cpu", help="cpu, cuda or auto (the command line's flag is the teacher's: `LoadOptions.device`).", cli=False)
    student: Optional[str] = option(None, help="Student architecture: a registered name or timm:NAME.", default_text="from the input size",
                                    panel=OUTPUT)
    eval_data: Optional[str] = option(None, help="Labelled data to report accuracy on (not covered by the guarantee).", panel=DATA)
    private_data: Optional[str] = option(None, help="The labelled private training data (any reader): record-level methods.", panel=DATA)
    public_data: Optional[str] = option(None, help="Unlabelled public images used as queries (Private-kNN: labelled by the private data; "
                                        "DPDFD: replaces the data-free prior, marked on the card).", panel=DATA)
    pixel_range: Optional[float] = option(None, help="Maximum pixel value of data stored as float or wide integers (e.g. 255); uint8 is "
                                          "0..255, float must be in [0, 1]. Never inferred from the data.", panel=DATA)
    class_names: Optional[tuple[str, ...]] = option(None, help="The class list in label order, comma-separated or a file with one name per "
                                                    "line: for ImageFolders whose class folders have names (cat, dog). Public by your "
                                                    "statement; on the card.", panel=DATA, parse=_parse_class_names)
    seeded_noise: bool = option(False, help="Tests and benchmarks only: draw the DP noise and subsamples from `seed` (reproducible, NOT secret: "
                                "anyone with the card can regenerate the noise; the card says so and the audit fails it unless "
                                "`allow_seeded_noise`).")
    sign_key: Optional[str] = option(None, help="Sign the card with this Ed25519 private key (dpconvert card keygen); the audit's "
                                     "`trusted_keys` checks it.", panel=OUTPUT)
    force: bool = option(False, help="Replace existing outputs (the model, its cards, a saved generator).", panel=OUTPUT)
    teacher_diagnostics: bool = option(False, help="Show statistics of the teacher's un-noised answers on the console (the student's "
                                       "agreement with the teacher on held-out synthetic inputs, non-finite answers). Not private: "
                                       "keep it off where the log may be public (CI).", panel=OUTPUT)
    teacher_card: Optional[str] = option(None, help="The teacher's own dpconvert privacy card (default: the one embedded in an ONNX teacher). "
                                         "When it verifies, the student's card carries the teacher's record-level guarantee too.", panel=TEACHER)
    trusted_keys: Optional[str] = option(None, help="Public keys (a folder of *.pub) a teacher card's signature must verify against.",
                                         panel=TEACHER)
    private_data_is_not_teacher_data: bool = option(False, help="Your statement that `private_data` holds none of the teacher's training "
                                                    "records (recorded on the card, not checked). Without it, a DP teacher's guarantee and "
                                                    "this run's compose for those records.", panel=TEACHER)
    no_privacy: bool = option(False, help="DPDFD without noise (ε = ∞): a non-private student for comparison only; its card says so and "
                              "every audit fails it.")
    parity_inputs: int = option(256, help="Inputs of the ONNX-vs-torch parity check.", cli=False)
    command: Optional[str] = option(None, help="The command line, for the card.", cli=False)
    delta_is_default: bool = field(init=False, default=False)  # the user gave no δ: a method may tie it to its units

    def __post_init__(self) -> None:
        if self.no_privacy:
            if self.eps is not None and math.isfinite(self.eps) or self.noise_multiplier not in (None, 0):
                raise OptionError("`no_privacy` trains a student without noise (ε = ∞)", fix="drop `eps` and `noise_multiplier`", param="eps")
            object.__setattr__(self, "eps", None)
            object.__setattr__(self, "noise_multiplier", 0.0)
        elif self.eps is not None and math.isinf(self.eps) or self.noise_multiplier == 0:
            raise OptionError("ε = ∞ (no noise) is no privacy at all", fix="give a finite `eps`, or `no_privacy` to train a non-private "
                                 "student for comparison (its card says so and every audit fails it)", param="eps")
        if self.delta is None:
            object.__setattr__(self, "delta", DEFAULT_DELTA)
            object.__setattr__(self, "delta_is_default", True)
        if self.eps is not None and self.noise_multiplier is not None:
            raise OptionError(fix="give `eps` (σ is calibrated to it) or `noise_multiplier` (ε is computed from it), not both", param="eps")
        if self.eps is None and self.noise_multiplier is None:
            object.__setattr__(self, "eps", DEFAULT_EPS)
        if self.eps is not None and not self.eps > 0:
            raise OptionError(fix=f"`eps` must be > 0, got {self.eps}", param="eps")
        if self.noise_multiplier is not None and self.noise_multiplier < 0:
            raise OptionError(fix=f"`noise_multiplier` must be >= 0, got {self.noise_multiplier}", param="noise_multiplier")
        if not 0 < self.delta < 1:
            raise OptionError(fix=f"`delta` must be in (0, 1), got {self.delta}", param="delta")
        if self.delta > DELTA_CEILING and not self.allow_large_delta:
            raise OptionError(f"`delta` {self.delta:g} is above the ceiling {DELTA_CEILING:g} (δ is the chance that the guarantee fails "
                                 "outright)", fix=f"give `delta` {DELTA_CEILING:g} or less, or `allow_large_delta` to accept it (the card warns "
                                 "and `dpconvert audit` fails it unless its `max_delta` admits it)", param="delta")
        if self.parity_inputs < 1:
            raise OptionError(fix="`parity_inputs` must be >= 1", param="parity_inputs")
        if self.private_data_is_not_teacher_data and self.private_data is None:
            raise OptionError("`private_data_is_not_teacher_data` is a statement about `private_data`", fix="give it with `private_data`, or drop it", param="private_data_is_not_teacher_data")
        if self.class_names is not None:
            object.__setattr__(self, "class_names", tuple(self.class_names))
            if len(self.class_names) < 2 or len(set(self.class_names)) != len(self.class_names):
                raise OptionError(fix="`class_names` must list at least two distinct names in label order", param="class_names")

    def data_format(self) -> dict:
        """How every data set of this run is read (``io.data.load_data``'s keywords): declared, never inferred from the data."""
        return {"pixel_range": self.pixel_range, "class_names": list(self.class_names) if self.class_names else None}


def resolve_device(device: str) -> str:
    if device not in ("cpu", "cuda", "auto") and not device.startswith("cuda:"):
        raise OptionError(fix=f"`device` must be cpu, cuda or auto, got {device!r}", param="device")
    if device == "auto" or device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return "cuda" if device == "auto" else device
        if device != "auto":
            raise OptionError("`device` cuda was asked for but no CUDA device is available", fix="use `device` cpu", param="device")
        return "cpu"
    return device
