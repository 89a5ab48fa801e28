"""Shared fixtures: small real models saved in every teacher format."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch


def main_exit_code(args: list) -> int:
    """Run ``dpconvert ARGS`` in-process without capturing output; return the exit code."""
    from dpconvert import cli

    old = sys.argv
    sys.argv = ["dpconvert", *[str(a) for a in args]]
    try:
        cli.main()
        return 0
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = old


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Run ``dpconvert ARGS`` in-process; return (exit code, stdout, stderr)."""
    code = main_exit_code(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def tamper_weights(path) -> None:
    """Change one weight of an ONNX model in place (its embedded card untouched)."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(path)
    w = proto.graph.initializer[0]
    arr = numpy_helper.to_array(w).copy()
    arr.flat[0] += 0.5
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    onnx.save(proto, path)


@pytest.fixture
def cli(capsys):
    return lambda *args: run_cli([str(a) for a in args], capsys)


class TinyCNN(torch.nn.Module):
    """A plain CNN (no timm) for TorchScript / export / ONNX / pickle sources."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(4)
        self.fc = torch.nn.Linear(8 * 16, 10)

    def forward(self, x):
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict:
    """One small real model in each teacher format, with its reference model."""
    import timm
    from safetensors.torch import save_file

    d: Path = tmp_path_factory.mktemp("teachers")
    torch.manual_seed(0)
    resnet = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).eval()
    cnn = TinyCNN().eval()
    x = torch.randn(4, 1, 28, 28)
    torch.save(resnet.state_dict(), d / "resnet18_state.pt")
    save_file({k: v.contiguous() for k, v in resnet.state_dict().items()}, str(d / "resnet18.safetensors"))
    torch.jit.save(torch.jit.trace(cnn, x), str(d / "cnn_script.pt"))
    torch.export.save(torch.export.export(cnn, (x,)), str(d / "cnn.pt2"))
    torch.onnx.export(cnn, (x,), str(d / "cnn.onnx"), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "b"}, "logits": {0: "b"}}, dynamo=False)
    torch.save(cnn, d / "cnn_pickled.pt")
    return {"dir": d, "resnet": resnet, "cnn": cnn, "x": x}


@pytest.fixture(scope="session")
def dp_teacher(tmp_path_factory):
    """A DP-SGD student (record-level card, ε ≈ 1, trained on the digits) to be the next conversion's teacher."""
    d = tmp_path_factory.mktemp("dpteacher")
    assert main_exit_code(["builtin:digits", "--method", "dpsgd", "--private-data", "builtin:digits:train", "--epochs", "1",
                           "--out", d / "teacher.onnx"]) == 0
    return d / "teacher.onnx"


@pytest.fixture(scope="session")
def signed(tmp_path_factory):
    """A signed default digits conversion (s.onnx) and the folder of trusted keys (keys/): tests copy, never edit, them."""
    d = tmp_path_factory.mktemp("signed")
    (d / "keys").mkdir()
    assert main_exit_code(["card", "keygen", d / "keys" / "release"]) == 0
    assert main_exit_code(["builtin:digits", "--eps", "1", "--steps", "1", "--batch-size", "1500", "--epochs", "1", "--out", d / "s.onnx",
                           "--sign-key", d / "keys" / "release"]) == 0
    return d
