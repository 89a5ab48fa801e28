"""Checks on the teacher before any noisy release (DPDFD sends its answers through the mechanism).

The query-level analysis needs each released row to depend on its own query only, and on a finite answer:

* **Row independence.** A teacher that normalises over the batch (BatchNorm left in training mode, e.g. a
  ``torch.export`` program exported in training mode, where ``.eval()`` no longer switches it) lets every row's
  answer move when one other query changes: one answer's influence is then spread over the whole release and the
  per-row sensitivity C no longer holds. So the same inputs are answered in two different batches and compared, at
  the probe's size and at the size of the release's own teacher calls (a teacher may couple rows only in larger
  batches): a row answered alone must get the answer it gets inside a full call.
* **Finite answers.** A non-finite logit turns its row into NaN, which the noise does not mask. The probe must be
  finite; inside a release the mechanism maps any non-finite row to a zero row (``NormalisedGaussianRelease``), so
  nothing non-finite is ever released and the run does not stop on a data-dependent condition mid-release.

The probe inputs come from the query source (synthetic or public), never from private data.
"""

from __future__ import annotations

import torch

from dpconvert.errors import DpconvertError

PROBE_SIZE = 32
REL_TOL = 1e-3  # answers of the same input in two batches may differ by float reordering, not by batch statistics


@torch.inference_mode()
def check_teacher(teacher, probe: torch.Tensor, call: torch.Tensor | None = None) -> None:
    """Raise a one-line ``DpconvertError`` if the teacher's answers are non-finite or depend on the rest of the batch.
    ``call``: inputs as many as one of the release's teacher calls holds (from the query source)."""
    if call is not None and len(call) > PROBE_SIZE:
        _check_in_call(teacher, call)
    x = probe[:PROBE_SIZE]
    h = max(1, len(x) // 2)
    try:
        full = teacher(x).float()
        other = torch.cat([x[:h], x[h:].flip(0) * 3.0 + 1.0]) if len(x) > h else torch.cat([x[:h], x[:h] * 3.0 + 1.0])
        mixed = teacher(other).float()[:h]
        alone = teacher(x[:1]).float()
    except Exception as e:  # noqa: BLE001 - a teacher is user code; report it in one line
        raise DpconvertError(f"the teacher failed on a probe batch ({type(e).__name__}: {str(e).splitlines()[0][:160]})",
                             fix="export it in eval mode for inputs of its `input_size`", param="input_size") from None
    if not torch.isfinite(full).all():
        raise DpconvertError("the teacher returns non-finite outputs (inf/NaN) on probe inputs",
                             fix="fix or re-export it (dpconvert never releases a non-finite answer)")
    scale = 1.0 + float(full.abs().max())
    drift = max(float((full[:h] - mixed).abs().max()), float((full[:1] - alone).abs().max()))
    if drift > REL_TOL * scale:
        raise DpconvertError(f"the teacher's answer to one input changes with the other inputs of its batch (by {drift:.3g}): it "
                             "uses batch statistics (e.g. BatchNorm in training mode)",
                             fix="export it in eval mode (model.eval() before torch.export / torch.jit / ONNX export)")


def _check_in_call(teacher, call: torch.Tensor) -> None:
    """Rows picked across a full-size call (first, middle, last), each answered alone and inside the call."""
    picks = sorted({0, len(call) // 2, len(call) - 1})
    try:
        inside = teacher(call).float()[picks]
        alone = torch.cat([teacher(call[i:i + 1]).float() for i in picks])
    except Exception as e:  # noqa: BLE001 - a teacher is user code; report it in one line
        raise DpconvertError(f"the teacher failed on a batch of {len(call)} inputs ({type(e).__name__}: {str(e).splitlines()[0][:160]})",
                             fix="export it in eval mode with a dynamic batch size") from None
    if not torch.isfinite(inside).all():
        return  # the probe below names it
    drift = float((inside - alone).abs().max())
    if drift > REL_TOL * (1.0 + float(inside.abs().max())):
        raise DpconvertError(f"the teacher's answer to one input changes when {len(call)} inputs are answered together (by {drift:.3g}): it "
                             "uses batch statistics at the release's batch size", fix="export it in eval mode (model.eval() before "
                             "torch.export / torch.jit / ONNX export)")
