"""Details a new user meets in the first hour ("The first hour of a new user, round 2", items 8, 10 and 13)."""

from __future__ import annotations

import re

import pytest

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]


@pytest.mark.slow
def test_inspect_shows_the_whole_hash_and_warnings_in_flags(cli, tmp_path, monkeypatch):
    import timm
    from safetensors.torch import save_file

    save_file(timm.create_model("resnet10t", pretrained=False, num_classes=10).state_dict(), str(tmp_path / "r.safetensors"))
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("inspect", tmp_path / "r.safetensors")
    assert code == 0
    from dpconvert.io.hashing import file_sha256

    assert file_sha256(tmp_path / "r.safetensors") in re.sub(r"[\s│]+", "", out)  # folded, never cut with …
    assert "`arch`" not in err and "--arch" in err and "--input-size" in err  # the flags a user types
    assert re.search(r"input size 3x\d+x\d+ taken from timm's resnet10t config", " ".join(err.split()))


def test_verbose_and_quiet_go_anywhere(cli, tmp_path):
    from dpconvert.cli.app import _global_flags_first, _with_default_command

    assert _with_default_command(_global_flags_first(["builtin:digits", "--eps", "1", "-q"])) == ["-q", "convert", "builtin:digits", "--eps", "1"]
    code, out, err = cli("builtin:digits", *FAST, "--out", tmp_path / "s.onnx", "-q")
    assert code == 0, err
    assert "privacy plan" not in out and "release 1/1" not in out and "dpconvert summary" in out


@pytest.mark.slow
def test_synth_shows_progress_and_a_summary_and_a_labelled_grid(cli, tmp_path):
    from PIL import Image

    out = tmp_path / "d.npz"
    code, stdout, err = cli("synth", "--private-data", "builtin:digits:train", "--out", out, "--input-size", "1,8,8", "--num-classes", "10",
                            "--eps", "4", "--gan-generator-steps", "10", "--samples", "200", "--grid", tmp_path / "g.png")
    assert code == 0, err
    text = " ".join(stdout.split())
    assert "dpconvert synth summary" in text and "from this data set" in text and "step 3/10" not in text
    grid = Image.open(tmp_path / "g.png")
    assert grid.width > 400 and grid.height > 400  # 8×8 samples enlarged, class labels in a margin
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.markdown import render_markdown

    md = render_markdown(PrivacyCard.read(f"{out}.card.json"))
    assert "of the teacher" not in md and "Record level, the headline" in md


HELP_COMMANDS = [["convert"], ["synth"], ["plan"], ["audit"], ["inspect"], ["card", "show"], ["card", "verify"],
                 ["card", "export"], ["card", "sign"], ["card", "keygen"]]


def test_every_help_speaks_one_style(cli, monkeypatch):
    """Item 8: value types as INT/NUM/TEXT/PATH (not Python's <list[str]>), arguments as TEACHER..., one flag per option,
    defaults written one way ("Default: X."), and no help text printed twice (the GAN options two methods share)."""
    monkeypatch.setenv("COLUMNS", "80")
    for command in HELP_COMMANDS:
        code, out, _ = cli(*command, "--help")
        assert code == 0, command
        assert not re.search(r"<[a-z\[\]]+>|\{[A-Z]+\}|\[default:|--[a-z-]+,--", out), (command, out)
        text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
        sentences = [s for s in re.split(r"(?<=\.) ", text) if len(s) > 40]
        assert len(sentences) == len(set(sentences)), (command, [s for s in sentences if sentences.count(s) > 1][:2])


def test_shrink_to_student_without_per_image_targets_is_refused_before_any_release(cli, tmp_path):
    """--shrink-to-student post-processes per-image targets; the digits default releases one target per row."""
    code, out, err = cli("builtin:digits", "--eps", "1", "--out", tmp_path / "s.onnx", "--shrink-to-student")
    assert code != 0
    line = " ".join(err.split())
    assert "--shrink-to-student" in line and "--prior-images" in line and "release 1/1" not in out + err
    assert not list(tmp_path.iterdir())
