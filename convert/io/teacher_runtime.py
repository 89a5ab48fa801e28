"""Where a torch teacher answers: in torch, or exported to ONNX and answered in onnxruntime.

On CPU the teacher's forward pass is most of a data-free run's time, and onnxruntime runs the same graph faster there
for the CNNs measured on 2 cores (its convolutions fuse BatchNorm and activations): the built-in digits CNN 1.2×, the
Fashion-MNIST CNN architectures 1.5× and 1.7×, the published CIFAR-10 model (TorchScript) 3.4×; a ResNet-34 at 3×64×64 the same
as torch (benchmarks/RESULTS.md, table 15). The exported graph is checked against torch
on probe inputs before it answers anything, so it is the same function up to float rounding; a graph that does not
export or does not agree leaves the teacher in torch (``auto``) or stops the run before any answer (``onnxruntime``).

Privacy does not depend on the runtime: every mechanism bounds its sensitivity by normalising or clipping what the
teacher answers, whatever computed it; the card's ``run.teacher_runtime`` says which one did (for speed questions).
"""

from __future__ import annotations

import logging
import warnings
from typing import Callable

from dpconvert.errors import DpconvertError
from dpconvert.registry import Registry

log = logging.getLogger("dpconvert")

PROBE_ROWS = 16  # probe inputs of the parity check (standard normal in the model's input space, and zeros)
# |onnxruntime − torch| ≤ PARITY_RTOL · (1 + max |logit|): float32 re-association differs by ~1e-6 relative on a
# ResNet-34; a wrong export (a dropped layer, a frozen BatchNorm in training mode) differs by whole logits
PARITY_RTOL = 1e-3

# --teacher-runtime NAME -> use(teacher, device, amp) -> the runtime that answers (a short description for the card)
RUNTIMES: Registry[Callable] = Registry("teacher runtime", param="teacher_runtime")


class NotExportable(Exception):
    """The teacher cannot be answered in onnxruntime (with the reason, one line)."""


def use_teacher_runtime(teacher, name: str, device: str, amp=None) -> str:
    """Make ``teacher`` (and each member of a teacher set) answer in the runtime ``name``; return what answers."""
    use = RUNTIMES.get(name)
    members = getattr(teacher, "members", None) or [teacher]
    used = {use(m, device, amp) for m in members}
    teacher.runtime = used.pop() if len(used) == 1 else ", ".join(sorted(used))
    return teacher.runtime


@RUNTIMES.register("torch")
def _torch(teacher, device: str, amp=None) -> str:
    return "torch" if teacher.module is not None else teacher.kind


@RUNTIMES.register("onnxruntime")
def _onnxruntime(teacher, device: str, amp=None) -> str:
    try:
        return _swap_to_onnxruntime(teacher, device, amp)
    except NotExportable as e:
        raise DpconvertError(f"{teacher.source}: cannot answer in onnxruntime ({e})", fix="use `teacher_runtime` auto or torch",
                             param="teacher_runtime") from None


@RUNTIMES.register("auto")
def _auto(teacher, device: str, amp=None) -> str:
    """onnxruntime where it can (CPU, fp32, an exportable graph that agrees with torch), else torch."""
    try:
        return _swap_to_onnxruntime(teacher, device, amp)
    except NotExportable as e:
        log.info("teacher answers in torch: %s", e)
        return _torch(teacher, device, amp)


def _swap_to_onnxruntime(teacher, device: str, amp) -> str:
    import onnxruntime as ort

    if teacher.kind == "onnx":
        return f"onnxruntime {ort.__version__}"  # already a black box there
    if teacher.module is None:
        raise NotExportable("no torch module to export")
    if not str(device).startswith("cpu"):
        raise NotExportable(f"device {device}: onnxruntime answers on CPU here")
    if amp:
        raise NotExportable(f"`amp` {amp} asks for torch's autocast")
    session = _session(teacher)
    forward = _session_forward(session)
    _check_parity(teacher, forward)
    teacher.forward = forward
    return f"onnxruntime {ort.__version__} (exported, parity checked)"


def _session(teacher):
    import onnxruntime as ort
    import torch

    from dpconvert.io.export import export_onnx

    module = teacher.module
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            proto = export_onnx(module, teacher.spec.shape)
    except Exception as e:  # DpconvertError from export_onnx, or anything the exporter raises on an exotic module
        raise NotExportable(f"ONNX export failed: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    # no spinning between calls: the student's torch threads run between two teacher chunks on the same cores
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise NotExportable(f"onnxruntime cannot load the export: {str(e).splitlines()[0][:160]}") from None


def _session_forward(session) -> Callable:
    import numpy as np
    import torch

    name = session.get_inputs()[0].name

    def forward(x):
        arr = np.ascontiguousarray(x.detach().cpu().float().numpy())
        return torch.from_numpy(session.run(None, {name: arr})[0]).float()

    return forward


def _check_parity(teacher, forward: Callable) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.zeros(1, *teacher.spec.shape), torch.randn(PROBE_ROWS - 1, *teacher.spec.shape, generator=g)])
    ref = teacher.forward(x).float().cpu()
    got = forward(x)
    if ref.shape != got.shape:
        raise NotExportable(f"the export answers shape {list(got.shape)}, torch {list(ref.shape)}")
    diff = float((ref - got).abs().max())
    if not diff <= PARITY_RTOL * (1.0 + float(ref.abs().max())):
        raise NotExportable(f"the export disagrees with torch by {diff:.3g} on probe inputs")
