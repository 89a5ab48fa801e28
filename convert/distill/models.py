"""The student as every part of DPDFD calls it, and the sizes of model calls."""

from __future__ import annotations

from typing import Callable, Optional

import torch

from dpconvert.distributed import World
from dpconvert.errors import DpconvertError

TEACHER_BATCH = 1024  # rows per teacher call (the teacher runs in inference mode; larger batches amortise call overhead)
INPUT_FLOATS_PER_CALL = 2**23  # and at most this many input floats per call (32 MB): 55 rows of 3×224×224


# for inputs of up to 1 024 values, also keep a 64-channel activation at the input's size under glibc's largest mmap
# threshold (32 MB): larger blocks are mapped and unmapped on every call, and each call faults their pages in again.
# Measured on 28×28 (wide CNN teacher, 3 M-row release, 2 threads): 1 024 rows per call spent 57 % of a core in the
# kernel (278 000 page faults/s), 128 rows 4 % (24 500/s) — benchmarks/RESULTS.md, table 15
MMAP_CEILING_FLOATS, WIDE_CHANNELS = 2**23, 64
# the release renders, runs the student and computes the rows (torch) for this many teacher calls at a time, then lets the
# teacher answer them call by call: an onnxruntime teacher alternating with torch on every call waited for the other's
# threads each time (Fashion-MNIST CNN, 28×28, 2 cores: render + teacher 116 µs per row one call at a time, 85 µs four
# calls at a time, 96 µs sixty-four at a time) — benchmarks/RESULTS.md, table 15
CALLS_PER_GROUP = 4


def rows_per_call(pixels: int) -> int:
    """Rows per teacher/student call for inputs of ``pixels`` values: TEACHER_BATCH for small images, fewer for large ones
    (a 1 024-row call at 3×224×224 would hold gigabytes of activations)."""
    rows = min(TEACHER_BATCH, INPUT_FLOATS_PER_CALL // max(pixels, 1))
    if pixels <= 1024:
        rows = min(rows, MMAP_CEILING_FLOATS // (WIDE_CHANNELS * max(pixels, 1)))
    return max(8, rows)


def rows_per_group(pixels: int) -> int:
    """Rows the release handles at once (CALLS_PER_GROUP teacher calls), within INPUT_FLOATS_PER_CALL input floats."""
    call = rows_per_call(pixels)
    return call * max(1, min(CALLS_PER_GROUP, INPUT_FLOATS_PER_CALL // (call * max(pixels, 1))))


def batched(fn: Callable, x: torch.Tensor, size: int) -> torch.Tensor:
    """``fn`` over ``x`` ``size`` rows at a time, written into one output allocated after the first chunk. Not a list of
    per-chunk results joined at the end: small results kept alive between each chunk's large temporaries fragment
    glibc's heap, and a 3 M-row release of 28×28 queries grew to 19 GB resident that way (900 MB without)."""
    if not len(x):
        return fn(x)
    out = None
    for start in range(0, len(x), size):
        y = fn(x[start:start + size])
        if out is None:
            out = y.new_empty((len(x), *y.shape[1:]))
        out[start:start + len(y)] = y
    return out


def joined(parts: list[torch.Tensor]) -> torch.Tensor:
    """A buffer as one tensor; a single release is used as is (no copy of ~300 MB at B=100k on 28×28)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def nhwc(x: torch.Tensor) -> torch.Tensor:
    """Images in channels-last layout (the students run in it); other tensors as they are."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def classifier(student: torch.nn.Module) -> torch.nn.Linear:
    """The student's last linear layer (timm's ``get_classifier``, or the last Linear of its ``head``)."""
    head = student.get_classifier() if hasattr(student, "get_classifier") else student.head
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise DpconvertError(f"the student's classifier ({type(head).__name__}) has no Linear layer", fix="choose another `student`", param="student")
    return linears[-1]


def student_classes(student: torch.nn.Module) -> int:
    return int(classifier(student).out_features)


class StudentModel:
    """The student in channels-last layout (CPU convolutions ~1.5× faster), under bf16 autocast when ``amp`` asks for
    it (outputs cast back to fp32 before anything is normalised, noised or compared), and wrapped for training steps
    across torchrun ranks (DDP: backward averages the gradients)."""

    def __init__(self, module: torch.nn.Module, device: str, amp: Optional[str], world: World) -> None:
        self.module = module.to(device).to(memory_format=torch.channels_last)
        self.device, self.amp = device, amp
        self.fit_model = world.wrap_for_training(self.module)

    def autocast(self):
        return torch.autocast(device_type=str(self.device).split(":")[0], dtype=torch.bfloat16, enabled=self.amp == "bf16")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            return self.module(nhwc(x)).float()

    def fit_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The forward of a training step."""
        with self.autocast():
            return self.fit_model(nhwc(x)).float()
