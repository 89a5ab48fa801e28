"""Errors for the files people really have ("The first hour of a new user, round 2", item 3): one line that names the
fix, a non-zero exit, no output written, no traceback."""

from __future__ import annotations

import json

import pytest

LFS = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 46830571\n"


def _one_line_error(cli, *args):
    code, _, err = cli(*args)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name", ["pytorch_model.bin", "resnet.pt", "model.onnx", "model.safetensors"])
def test_a_git_lfs_pointer_is_named_as_such(cli, tmp_path, name):
    (tmp_path / name).write_text(LFS)
    line = _one_line_error(cli, tmp_path / name, "--out", tmp_path / "s.onnx")
    assert "Git LFS pointer" in line and "git lfs pull" in line and not (tmp_path / "s.onnx").exists()
    assert "Git LFS pointer" in _one_line_error(cli, tmp_path / name, "--trust-pickle", "--out", tmp_path / "s.onnx")


def test_a_text_file_named_pt_is_not_called_a_pickle(cli, tmp_path):
    (tmp_path / "corrupt.pt").write_text("these are my notes, not a model\n")
    line = _one_line_error(cli, tmp_path / "corrupt.pt", "--out", tmp_path / "s.onnx")
    assert "not a PyTorch checkpoint" in line and "trust-pickle" not in line


@pytest.mark.slow
def test_an_input_size_that_contradicts_the_models_normalisation_says_so(cli, tmp_path):
    import timm
    from safetensors.torch import save_file

    save_file(timm.create_model("resnet10t", pretrained=False, num_classes=10).state_dict(), str(tmp_path / "r.safetensors"))
    line = _one_line_error(cli, tmp_path / "r.safetensors", "--input-size", "1,28,28", "--out", tmp_path / "s.onnx")
    assert "normalises 3 input channels but --input-size gives 1" in line and "--mean has" not in line


def test_an_unreachable_hub_is_one_line_without_retries(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = _one_line_error(cli, "timm:resnet18", "--out", tmp_path / "s.onnx")
    assert "--weights FILE" in line


def test_the_advice_for_an_edited_card_works(cli, tmp_path):
    out = tmp_path / "s.onnx"
    assert cli("builtin:digits", "--steps", "1", "--batch-size", "1500", "--epochs", "1", "--out", out)[0] == 0
    md = tmp_path / "s.onnx.card.md"
    md.write_text(md.read_text().replace("(ε, δ) = (1,", "(ε, δ) = (0.1,"))
    code, stdout, _ = cli("audit", out)
    assert code != 0 and "delete it, then" in " ".join(stdout.split())
    md.unlink()  # as the audit says
    assert cli("card", "keygen", tmp_path / "k")[0] == 0
    assert cli("card", "sign", out, "--key", tmp_path / "k")[0] == 0 and md.exists()
    assert cli("audit", out)[0] == 0
    sidecar = tmp_path / "s.onnx.card.json"
    card = json.loads(sidecar.read_text())
    card["warnings"].append("a hand-written note")
    sidecar.write_text(json.dumps(card))
    line = _one_line_error(cli, "card", "sign", out, "--key", tmp_path / "k")
    assert "delete the edited copy" in line and "audit it" not in line


def test_a_python_call_records_a_runnable_command(tmp_path):
    """The card of a conversion started from Python records the dpconvert command that repeats it."""
    import shlex

    import dpconvert
    from conftest import main_exit_code

    result = dpconvert.convert("builtin:digits", out=tmp_path / "api.onnx", eps=2.0, batch_size=1500, epochs=1, releases=1)
    command = result.card.data["command"]
    assert "`" not in command and "--eps 2" in command and "--batch-size 1500" in command and "--epochs 1" in command
    words = shlex.split(command)
    assert words[0] == "dpconvert"
    words[words.index("--out") + 1] = str(tmp_path / "again.onnx")
    assert main_exit_code(words[1:]) == 0
    again = json.loads((tmp_path / "again.onnx.card.json").read_text())
    assert again["mechanism"]["batch_size"] == result.card.data["mechanism"]["batch_size"]
    assert again["guarantee"]["epsilon"] == result.card.data["guarantee"]["epsilon"]
