"""A torch teacher answers in onnxruntime on CPU only when its export agrees with torch (io/teacher_runtime.py)."""

from __future__ import annotations

import pytest
import torch

from dpconvert.errors import DpconvertError
from dpconvert.io.teacher_runtime import use_teacher_runtime
from dpconvert.io.teachers import LoadOptions, load_teacher

SPEC = dict(arch="timm:resnet18", num_classes=10, in_chans=1, input_size=(1, 28, 28))


def _resnet(models):
    return load_teacher(str(models["dir"] / "resnet18.safetensors"), LoadOptions(**SPEC))


@pytest.mark.parametrize("name", ["resnet18.safetensors", "cnn_script.pt"])
def test_auto_answers_in_onnxruntime_with_torchs_answers(models, name):
    t = load_teacher(str(models["dir"] / name), LoadOptions(**SPEC) if name.endswith("safetensors") else LoadOptions(input_size=(1, 28, 28), num_classes=10))
    x = torch.randn(33, *t.spec.shape, generator=torch.Generator().manual_seed(1))
    before = t(x)
    runtime = use_teacher_runtime(t, "auto", "cpu")
    assert runtime.startswith("onnxruntime") and t.runtime == runtime
    after = t(x)
    assert after.dtype == torch.float32 and after.shape == before.shape
    assert (after - before).abs().max() < 1e-4 * (1 + before.abs().max())


class _BranchOnInput(torch.nn.Module):
    """Python control flow on the input's values: tracing keeps the branch the dummy input took (zeros), so the export
    answers half of what torch answers on any other input."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)) * (2.0 if float(x.abs().sum()) > 0 else 1.0)


def _branching_teacher():
    from dpconvert.io.spec import InputSpec
    from dpconvert.io.teachers import Teacher, _torch_forward

    module = _BranchOnInput().eval()
    return Teacher(_torch_forward(module, "cpu"), InputSpec(1, 8, 8, 10), "pickle", "branch.pt", "a branching module", module=module)


def test_an_export_that_disagrees_with_torch_leaves_the_teacher_in_torch():
    t = _branching_teacher()
    x = torch.randn(5, 1, 8, 8)
    before = t(x)
    assert use_teacher_runtime(t, "auto", "cpu") == "torch"
    assert torch.equal(t(x), before)


def test_asking_for_onnxruntime_where_the_export_disagrees_stops_the_run():
    with pytest.raises(DpconvertError, match="disagrees with torch") as e:
        use_teacher_runtime(_branching_teacher(), "onnxruntime", "cpu")
    assert e.value.param == "teacher_runtime"


@pytest.mark.parametrize("device, amp", [("cuda", None), ("cpu", "bf16")])
def test_auto_keeps_torch_on_gpus_and_under_autocast(models, device, amp):
    t = _resnet(models)
    forward = t.forward
    from dpconvert.io import teacher_runtime

    assert teacher_runtime._auto(t, device, amp) == "torch"  # the device is only read, nothing moves to it
    assert t.forward is forward


def test_torch_keeps_the_teacher_as_loaded(models):
    t = _resnet(models)
    forward = t.forward
    assert use_teacher_runtime(t, "torch", "cpu") == "torch" and t.forward is forward


def test_an_unknown_runtime_names_the_option(models):
    with pytest.raises(DpconvertError) as e:
        use_teacher_runtime(_resnet(models), "tensorrt", "cpu")
    assert "teacher_runtime" in str(e.value) or e.value.param == "teacher_runtime"
