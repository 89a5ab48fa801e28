"""Every teacher source loads a real model whose logits equal the original's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import timm
import torch

from dpconvert.errors import DpconvertError
from dpconvert.io.teachers import LoadOptions, load_teacher


def _max_diff(teacher, model, x):
    with torch.no_grad():
        return (teacher(x) - model(x)).abs().max().item()


@pytest.mark.parametrize("name", ["resnet18_state.pt", "resnet18.safetensors"])
def test_state_dict_sources_match_original(models, name):
    t = load_teacher(str(models["dir"] / name), LoadOptions(arch="timm:resnet18", num_classes=10, in_chans=1, input_size=(1, 28, 28)))
    assert t.kind in ("state_dict", "safetensors")
    assert t.spec.shape == (1, 28, 28) and t.spec.num_classes == 10
    assert len(t.sha256) == 64
    assert _max_diff(t, models["resnet"], models["x"]) < 1e-5


def test_a_safetensors_teacher_that_names_its_timm_arch_and_input_loads_with_no_flag(models):
    """The file says everything (`dpconvert.arch` timm:NAME and `dpconvert.input_spec` in its metadata, as
    benchmarks/train_fmnist_teachers.py writes them): no flag is needed, and the file's input spec is the one used."""
    import json

    from safetensors.torch import save_file

    from dpconvert.io.spec import InputSpec

    path = models["dir"] / "self_described.safetensors"
    spec = InputSpec(1, 28, 28, 10, mean=(0.286,), std=(0.353,))
    save_file({k: v.contiguous() for k, v in models["resnet"].state_dict().items()}, str(path),
              metadata={"dpconvert.arch": "timm:resnet18", "dpconvert.input_spec": json.dumps(spec.to_dict())})
    t = load_teacher(str(path), LoadOptions())
    assert t.arch == "timm:resnet18" and t.spec == spec
    assert _max_diff(t, models["resnet"], models["x"]) < 1e-5


def test_timm_name_with_local_weights_offline(models):
    from safetensors.torch import save_file

    path = models["dir"] / "timm_weights.safetensors"
    save_file({k: v.contiguous() for k, v in models["resnet"].state_dict().items()}, str(path))
    t = load_teacher("timm:resnet18", LoadOptions(weights=str(path), num_classes=10, in_chans=1, input_size=(1, 28, 28)))
    assert t.kind == "timm" and t.arch == "timm:resnet18"
    assert _max_diff(t, models["resnet"], models["x"]) < 1e-5


@pytest.mark.parametrize("name,kind,tol", [("cnn_script.pt", "torchscript", 1e-5), ("cnn.pt2", "torch.export", 1e-5), ("cnn.onnx", "onnx", 1e-4)])
def test_graph_sources_match_original(models, name, kind, tol):
    opts = LoadOptions() if kind != "torchscript" else LoadOptions(input_size=(1, 28, 28), num_classes=10)
    t = load_teacher(str(models["dir"] / name), opts)
    assert t.kind == kind
    assert t.spec.shape == (1, 28, 28) and t.spec.num_classes == 10
    assert _max_diff(t, models["cnn"], models["x"]) < tol


def test_pickled_module_needs_trust_flag(models):
    path = str(models["dir"] / "cnn_pickled.pt")
    with pytest.raises(DpconvertError, match="`trust_pickle`") as e:
        load_teacher(path, LoadOptions(input_size=(1, 28, 28), num_classes=10))
    assert "arbitrary code" in str(e.value)
    t = load_teacher(path, LoadOptions(input_size=(1, 28, 28), num_classes=10, trust_pickle=True))
    assert t.kind == "pickled-module" and t.warnings
    assert _max_diff(t, models["cnn"], models["x"]) < 1e-5


def test_builtin_teacher_is_small_and_accurate():
    from dpconvert.builtin import BUILTIN_TEACHERS
    from dpconvert.io.data import load_data

    assert BUILTIN_TEACHERS.get("digits").stat().st_size <= 1_000_000
    t = load_teacher("builtin:digits")
    test = load_data("builtin:digits", t.spec)
    acc = (t(test.x).argmax(1) == test.y).float().mean().item()
    assert acc > 0.95


def test_inspect_json(cli, models):
    code, out, _ = cli("inspect", models["dir"] / "cnn.onnx", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["kind"] == "onnx" and info["input_spec"]["height"] == 28 and info["num_classes"] == 10
    assert set(info) >= {"source", "kind", "architecture", "num_params", "input_spec", "sha256", "description", "warnings"}


@pytest.mark.parametrize(
    "args,needle",
    [
        (["does_not_exist.pt"], "no such file"),
        (["timm:resnt18"], "did you mean 'timm:resnet18'"),
        (["builtin:digitz"], "did you mean 'digits'"),
        (["{dir}/cnn_pickled.pt", "--input-size", "1,28,28", "--num-classes", "10"], "--trust-pickle"),
        (["{dir}/cnn.onnx", "--input-size", "1,32,32"], "--input-size"),
        (["{dir}/cnn_script.pt", "--input-size", "1,28,28", "--num-classes", "7"], "--num-classes"),
        (["{dir}/cnn_script.pt"], "--input-size C,H,W (e.g. 1,28,28) and --num-classes K"),  # everything missing, in one line
        (["{dir}/resnet18_state.pt", "--arch", "timm:resnet18", "--num-classes", "5", "--in-chans", "1"], "--num-classes"),
        (["{dir}/corrupt.safetensors", "--arch", "datalens_cnn"], "not a valid safetensors"),
        (["{dir}/corrupt.pt", "--arch", "datalens_cnn"], "corrupt"),
        (["{dir}/corrupt.onnx"], "onnxruntime cannot load"),
    ],
)
def test_bad_inputs_fail_with_one_line(cli, models, args, needle):
    d = models["dir"]
    for name in ("corrupt.safetensors", "corrupt.pt", "corrupt.onnx"):
        (d / name).write_bytes(b"\x00garbage" * 10)
    code, out, err = cli("inspect", *[a.format(dir=d) for a in args])
    assert code == (2 if "did you mean" in needle else 1)  # an unknown name is a usage error
    assert needle in err
    assert err.strip().count("\n") == 0, err  # one line
    assert "Traceback" not in err


def test_help_is_fast_and_lists_commands():
    r = subprocess.run([sys.executable, "-m", "dpconvert", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for cmd in ("inspect", "plan", "convert", "audit"):
        assert cmd in r.stdout
    r = subprocess.run([sys.executable, "-c", "import sys, dpconvert.cli.app; print('torch' in sys.modules)"], capture_output=True, text=True)
    assert r.stdout.strip() == "False"  # --help must not pay for torch


def test_usage_error_exit_code(cli):
    code, _, _ = cli("plan", "--no-such-flag")
    assert code == 2


def test_version(cli):
    import dpconvert

    code, out, _ = cli("--version")
    assert code == 0 and dpconvert.__version__ in out


def test_pickled_timm_module_needs_only_its_input_size(tmp_path):
    """num_classes comes from the module (timm's attribute, or a forward pass); mean/std from its pretrained_cfg."""
    import timm

    from dpconvert.io.teachers import NORMALISATION_UNKNOWN, LoadOptions, load_teacher

    model = timm.create_model("resnet18", pretrained=False, num_classes=7, in_chans=1).eval()
    torch.save(model, tmp_path / "m.pt")
    t = load_teacher(str(tmp_path / "m.pt"), LoadOptions(trust_pickle=True, input_size=(1, 32, 32)))
    assert t.spec.num_classes == 7 and t.spec.shape == (1, 32, 32)
    assert NORMALISATION_UNKNOWN in t.warnings  # 3-channel ImageNet stats do not fit one channel: no silent guess
    from conftest import TinyCNN

    plain = TinyCNN().eval()
    torch.save(plain, tmp_path / "plain.pt")
    t = load_teacher(str(tmp_path / "plain.pt"), LoadOptions(trust_pickle=True, input_size=(1, 28, 28)))
    assert t.spec.num_classes == 10 and NORMALISATION_UNKNOWN in t.warnings  # counted by a forward pass
    t = load_teacher(str(tmp_path / "plain.pt"), LoadOptions(trust_pickle=True, input_size=(1, 28, 28), mean=(0.5,), std=(0.2,)))
    assert NORMALISATION_UNKNOWN not in t.warnings
    rgb = timm.create_model("resnet18", pretrained=False, num_classes=5).eval()
    torch.save(rgb, tmp_path / "rgb.pt")
    t = load_teacher(str(tmp_path / "rgb.pt"), LoadOptions(trust_pickle=True))  # input size from its pretrained_cfg
    assert t.spec.shape == (3, 224, 224) and t.spec.num_classes == 5 and NORMALISATION_UNKNOWN not in t.warnings
    assert t.spec.mean == tuple(rgb.pretrained_cfg["mean"])


@pytest.mark.slow
def test_imagenet_shaped_timm_checkpoint_converts_end_to_end(tmp_path, cli):
    """The user's `dpconvert resnet34.pt --arch timm:resnet34` path, scaled down: a 1 000-class timm checkpoint (timm's
    tiny test_resnet) at 3×40×40 from a local file, the default large-input student, a time estimate up front."""
    import json

    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    save_file(timm.create_model("test_resnet", num_classes=1000).state_dict(), str(tmp_path / "teacher.safetensors"))
    out = tmp_path / "student.onnx"
    code, stdout, err = cli(tmp_path / "teacher.safetensors", "--arch", "timm:test_resnet", "--input-size", "3,40,40", "--eps", "1",
                            "--batch-size", "256", "--epochs", "1", "--out", out)
    assert code == 0, err
    assert "estimated on this machine" in stdout and "student training" in stdout
    card = json.loads((tmp_path / "student.onnx.card.json").read_text())
    assert card["model"]["input_shape"] == [None, 3, 40, 40] and card["model"]["num_classes"] == 1000
    # on a CPU, the reduced-resolution student (40 px pooled by 2 inside the model); the ONNX still takes 3×40×40
    assert card["model"]["architecture"] == "reduced_cnn" and card["guarantee"]["epsilon"] == pytest.approx(1.0)
    assert card["mechanism"]["device_defaults"]["student"] is True
    assert card["mechanism"]["config"]["minibatch"] == 64  # large inputs
    # 1 000 near-uniform logits after one epoch: a near-tie can flip in the last float bit (0.996 on one CI machine), so
    # the bar is the product's own: parity inside the thresholds that would otherwise put a warning on the card
    from dpconvert.accounting.statements import PARITY_MAX_ABS_DIFF, PARITY_MIN_TOP1, WEAK_PARITY_PREFIX

    parity = card["export"]["parity"]
    assert parity["max_abs_diff"] < PARITY_MAX_ABS_DIFF and parity["top1_agreement"] >= PARITY_MIN_TOP1
    assert not any(w.startswith(WEAK_PARITY_PREFIX) for w in card["warnings"])


@pytest.mark.slow
def test_a_bare_timm_state_dict_is_recognised(models, tmp_path, cli):
    """The headline: `dpconvert resnet34.pt --eps 1 --out student.onnx` with no --arch: the keys say ResNet, the head
    says 10 classes, the first convolution 1 channel; timm's config gives the input size."""
    from conftest import TinyCNN

    from dpconvert.io.teachers import NORMALISATION_UNKNOWN, LoadOptions, load_teacher

    t = load_teacher(str(models["dir"] / "resnet18_state.pt"))
    assert t.arch == "timm:resnet18" and t.spec.num_classes == 10 and t.spec.channels == 1
    assert any("recognised from the checkpoint" in w for w in t.warnings) and NORMALISATION_UNKNOWN in t.warnings
    x = torch.randn(2, 1, 28, 28)
    assert torch.allclose(t(x), models["resnet"](x), atol=1e-5)
    assert load_teacher(str(models["dir"] / "resnet18_state.pt"), LoadOptions(arch="resnet18")).arch == "timm:resnet18"  # a timm name
    rgb = tmp_path / "resnet34.pt"
    torch.save(timm.create_model("resnet34", pretrained=False, num_classes=10).state_dict(), rgb)
    t = load_teacher(str(rgb))
    assert t.arch == "timm:resnet34" and t.spec.shape == (3, 224, 224) and t.spec.num_classes == 10 and t.spec.mean == (0.485, 0.456, 0.406)
    torch.save(TinyCNN().state_dict(), tmp_path / "tiny.pt")
    code, _, err = cli("inspect", tmp_path / "tiny.pt")
    assert code == 1 and "--arch timm:NAME" in err and err.strip().count("\n") == 0


class _Softmaxed(torch.nn.Module):
    def __init__(self, inner, tuple_out=False) -> None:
        super().__init__()
        self.inner, self.tuple_out = inner, tuple_out

    def forward(self, x):
        logits = self.inner(x)
        return (logits, logits.sum()) if self.tuple_out else torch.softmax(logits, 1)


def test_a_softmax_teacher_is_warned_and_a_tuple_teacher_refused_by_name(models, tmp_path, cli):
    from dpconvert.io.teachers import LoadOptions, load_teacher

    x = torch.randn(2, 1, 28, 28)
    opts = LoadOptions(input_size=(1, 28, 28), num_classes=10)
    torch.jit.save(torch.jit.trace(_Softmaxed(models["cnn"]).eval(), x), str(tmp_path / "soft.pt"))
    assert any("ends in a softmax" in w for w in load_teacher(str(tmp_path / "soft.pt"), opts).warnings)
    assert not any("softmax" in w for w in load_teacher(str(models["dir"] / "cnn_script.pt"), opts).warnings)
    torch.jit.save(torch.jit.trace(_Softmaxed(models["cnn"], tuple_out=True).eval(), x, strict=False), str(tmp_path / "tuple.pt"))
    code, _, err = cli("inspect", tmp_path / "tuple.pt", "--input-size", "1,28,28", "--num-classes", "10")
    assert code == 1 and "returns a tuple of 2 values" in err and "--input-size" not in err


def test_a_graph_without_its_input_size_and_classes_names_both_in_one_line(tmp_path, cli):
    """A TorchScript file says neither its input size nor its class count: one error names both, readably."""
    module = torch.jit.trace(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval(), torch.zeros(2, 1, 8, 8))
    module.save(str(tmp_path / "t.pt"))
    code, _, err = cli(tmp_path / "t.pt", "--eps", "1", "--out", tmp_path / "s.onnx")
    assert code == 1 and "cannot tell the input size or the class count; give --input-size C,H,W" in err and "--num-classes K" in err, err


def test_loaders_do_not_ask_for_what_the_model_says(models, tmp_path):
    """TorchScript with its input size: the class count is what it answers; timm:NAME with local weights: the class
    count is the classifier's in the weights ("The first hour of a new user, round 2", item 11)."""
    import timm
    from safetensors.torch import save_file

    t = load_teacher(str(models["dir"] / "cnn_script.pt"), LoadOptions(input_size=(1, 28, 28)))
    assert t.spec.num_classes == 10
    save_file(timm.create_model("resnet10t", pretrained=False, num_classes=7).state_dict(), str(tmp_path / "r.safetensors"))
    t = load_teacher("timm:resnet10t", LoadOptions(weights=str(tmp_path / "r.safetensors"), input_size=(3, 32, 32)))
    assert t.spec.num_classes == 7
