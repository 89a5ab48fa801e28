"""ONNX export, always verified (timm ``utils/onnx.py`` habit, with the check on).

Export with a dynamic batch axis, ``onnx.checker.check_model(full_check=True)``,
then compare onnxruntime with torch on N inputs and record the max absolute
difference and top-1 agreement for the card.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import torch

from dpconvert.errors import DpconvertError

OPSET = 17


@dataclass
class ParityResult:
    inputs: int
    max_abs_diff: float
    top1_agreement: float

    def to_dict(self) -> dict:
        return {"inputs": self.inputs, "max_abs_diff": self.max_abs_diff, "top1_agreement": self.top1_agreement}


def export_onnx(model: torch.nn.Module, input_shape: tuple[int, int, int]):
    """Return a checked ``onnx.ModelProto`` of ``model`` (eval mode, CPU, dynamic batch)."""
    import onnx

    model = model.eval().cpu()
    dummy = torch.zeros(2, *input_shape)
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            # reflect padding exports as Slice ops with step −1, which torch's constant folding skips: harmless
            warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
            torch.onnx.export(
                model, (dummy,), buf, input_names=["input"], output_names=["logits"],
                dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=OPSET, dynamo=False,
            )
    except Exception as e:  # an architecture ONNX cannot express
        raise DpconvertError(f"ONNX export failed ({str(e).splitlines()[0][:200]})", fix="choose another `student`", param="student") from None
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    return proto


PARITY_FLOATS_PER_CALL = 2**22  # input floats per parity call (27 inputs of 3×224×224)


def parity(model: torch.nn.Module, proto, inputs: torch.Tensor) -> ParityResult:
    """onnxruntime vs torch on the same inputs."""
    import onnxruntime as ort

    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    import numpy as np

    model = model.eval().cpu()
    name = sess.get_inputs()[0].name
    per_call = max(1, PARITY_FLOATS_PER_CALL // max(inputs[0].numel(), 1))  # 256 inputs of 3×224×224 at once: ~12 GB
    ref, got = [], []
    for chunk in inputs.cpu().split(per_call):
        with torch.no_grad():
            ref.append(model(chunk).numpy())
        got.append(sess.run(None, {name: chunk.numpy()})[0])
    ref, got = np.concatenate(ref), np.concatenate(got)
    diff = float(abs(ref - got).max())
    agree = float((ref.argmax(1) == got.argmax(1)).mean())
    return ParityResult(int(inputs.shape[0]), diff, agree)
