"""Options are the single source of truth: every option is declared once on its options class, and the convert, plan
and synth commands are generated from those declarations (dpconvert/option_fields.py, cli/generated.py)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from dpconvert.io.teachers import LoadOptions
from dpconvert.methods import METHODS, method_order
from dpconvert.methods.dpgan import CRITICS, GanOptions
from dpconvert.option_fields import from_flat, option_specs, to_flat
from dpconvert.options import RunOptions

CLASSES = [RunOptions, LoadOptions, GanOptions, *(METHODS.get(m).Options for m in METHODS)]


def _sample(spec):
    """A valid value different from the default, as the command line gives it (text for parsed options)."""
    samples = {"input_size": "3,32,32", "mean": "0.5,0.5,0.5", "std": "0.2,0.2,0.2", "class_names": "a,b,c,d,e,f,g,h,i,j"}
    if spec.name in samples:
        return samples[spec.name]
    if spec.choices:
        return next(c for c in reversed(spec.choices) if c != spec.default)
    if spec.type is bool:
        return True
    if spec.type is int:
        return (spec.default or 1) + 2
    if spec.type is float:
        return round((spec.default or 0.3) * 0.5, 6)
    return "some_value"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_option_is_declared_with_help_and_its_choices_in_it(cls):
    for spec in option_specs(cls):  # raises for a field declared without help
        assert spec.help.strip().endswith((".", ")")), f"{cls.__name__}.{spec.name}: help is a sentence"
        assert "--" not in spec.help, f"{cls.__name__}.{spec.name}: the library names parameters in backticks, not flags"
        for choice in spec.choices or ():
            assert str(choice) in spec.help, f"{cls.__name__}.{spec.name}: help does not name the choice {choice!r}"


def test_method_order_lists_every_method_and_choices_match_their_registries():
    from dpconvert.accounting import ACCOUNTANTS
    from dpconvert.methods.dpdfd_options import ACCOUNTING, DISTILL_LOSS_NAMES
    from dpconvert.mechanisms.output_gradients import DISTILL_LOSSES

    assert sorted(method_order()) == sorted(METHODS) and method_order()[0] == "dpdfd"
    assert set(DISTILL_LOSS_NAMES) == set(DISTILL_LOSSES)
    assert {s.choices for s in option_specs(GanOptions) if s.name == "critic"} == {tuple(c for c in ("embedding", "dpsgd") if c in CRITICS)}
    assert set(CRITICS) == {"embedding", "dpsgd"}
    assert all(a in ACCOUNTANTS for a in ACCOUNTING.values())


@pytest.mark.parametrize("cls", [GanOptions, *(METHODS.get(m).Options for m in METHODS)], ids=lambda c: c.__name__)
def test_flat_options_round_trip(cls):
    """to_flat and from_flat are inverse: a nested sub-option (Private-kNN's `gan_critic`) is named flat both ways."""
    opts = cls()
    rebuilt, left = from_flat(cls, to_flat(opts))
    assert rebuilt == opts and not left


def test_a_nested_option_goes_to_its_sub_options_and_is_checked_there():
    from dpconvert.errors import DpconvertError

    opts = METHODS.get("pknn").options({"gan_critic": "dpsgd", "gan_steps": 7, "k": 5})
    assert opts.gan == GanOptions(critic="dpsgd", steps=7) and opts.k == 5
    with pytest.raises(DpconvertError, match="`gan_steps` configures `gan_critic` dpsgd, not embedding"):
        METHODS.get("pknn").options({"gan_steps": 7})  # the default critic would have ignored it
    with pytest.raises(DpconvertError, match="`gan_sampling_rate` must be in"):
        GanOptions(critic="dpsgd", sampling_rate=1.5)


def _captured(monkeypatch, cli, target: str, args: list):
    import dpconvert.api
    import dpconvert.synth

    seen = {}

    def capture(*a, **kw):
        seen["args"], seen["kwargs"] = a, kw
        raise SystemExit(0)

    monkeypatch.setattr(dpconvert.api if target != "synthesize" else dpconvert.synth, target, capture)
    code, _, err = cli(*args)
    assert code == 0, err
    return seen


def test_every_convert_flag_reaches_the_option_it_declares(monkeypatch, cli):
    """Each generated flag of `convert`, given a non-default value, arrives at the library as that option's value."""
    from dpconvert.cli.convert_cmd import CONVERT

    args, expected = ["convert", "builtin:digits", "--out", "s.onnx"], {}
    for p in CONVERT:
        if not p.specs:
            continue
        value = _sample(p.specs[0])
        args += [p.flags[0]] if value is True else [p.flags[0], str(value)]
        expected[p.name] = p.value(value)
    seen = _captured(monkeypatch, cli, "convert", args)["kwargs"]
    loader = seen.pop("loader")
    for name, value in expected.items():
        got = getattr(loader, name) if name in {f.name for f in dataclasses.fields(LoadOptions)} else seen[name]
        assert got == value, name
    assert loader.device == seen["device"]  # one --device for the teacher and the run


def test_plan_accepts_what_convert_takes_and_synth_its_gan_options(monkeypatch, cli):
    from dpconvert.cli.convert_cmd import CONVERT
    from dpconvert.cli.plan_cmd import PLAN

    method_flags = {p.name for p in CONVERT if p.specs and set(p.classes) & {METHODS.get(m).Options for m in METHODS}}
    assert method_flags - {"queries"} <= {p.name for p in PLAN}
    seen = _captured(monkeypatch, cli, "plan", ["plan", "--method", "pknn", "--gan-critic", "dpsgd", "--gan-steps", "9", "--k", "11"])
    assert seen["kwargs"]["gan_critic"] == "dpsgd" and seen["kwargs"]["gan_steps"] == 9 and seen["kwargs"]["k"] == 11
    seen = _captured(monkeypatch, cli, "synthesize", ["synth", "--private-data", "builtin:digits", "--out", "d.npz", "--input-size", "1,8,8",
                                                      "--num-classes", "10", "--gan-critic", "dpsgd", "--gan-steps", "9"])
    assert seen["kwargs"]["gan"] == GanOptions(critic="dpsgd", steps=9)


def test_one_flag_per_concept_with_each_methods_meaning(cli):
    """A concept several methods share is one flag whose help gives each method's meaning and default."""
    from dpconvert.cli.convert_cmd import CONVERT

    clip = next(p for p in CONVERT if p.name == "clip")
    assert {s.owner.__name__ for s in clip.specs} == {"DpdfdOptions", "DpsgdOptions"}
    assert "dpdfd:" in clip.help and "Default: 1." in clip.help and "dpsgd:" in clip.help and "Default: 0.1." in clip.help
    flags = [f for p in CONVERT for f in p.flags]
    assert len(flags) == len(set(flags))


def test_help_at_80_columns_leads_with_the_teacher_and_shows_no_bool(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("convert", "--help")
    assert code == 0 and "<bool>" not in out
    panels = [line for line in out.splitlines() if line.startswith("╭─")]
    assert [p.split()[1] for p in panels[:4]] == ["Arguments", "Options", "Start", "Teacher"]  # "Start here": --out, --eps, --method

    text = re.sub(r"[\s│]+", " ", out)  # the help as one line, without the panels' borders
    assert "Neighbours voting on each query. Default: 300." in text  # Private-kNN's k, from its declaration


@pytest.mark.parametrize("args", [["--eps", "abc"], ["--eps", "0"], ["--input-size", "3,32"], ["--method", "foo"], ["--student", "nope"],
                                  ["--delta", "2"]])
def test_usage_errors_exit_2_as_the_readme_says(cli, tmp_path, args):
    code, _, err = cli("builtin:digits", *args, "--out", tmp_path / "s.onnx")
    assert code == 2 and not list(tmp_path.iterdir()), err


def test_a_problem_that_is_not_usage_exits_1(cli, tmp_path):
    assert cli(tmp_path / "missing.pt", "--out", tmp_path / "s.onnx")[0] == 1


def test_convert_help_leads_with_what_a_new_user_needs(cli):
    """The first panel after the teacher is "Start here": --out, --eps, --method, --private-data; values read as INT,
    NUM or TEXT, not Python types."""
    code, out, _ = cli("convert", "--help")
    assert code == 0
    start, teacher = out.index("Start here"), out.index("─ Teacher")
    assert start < teacher and all(start < out.index(f) < teacher for f in ("--out", "--eps", "--method", "--private-data"))
    assert "<str>" not in out and "<int>" not in out and "<float>" not in out


def test_an_engine_setting_a_user_sets_has_its_one_default_in_the_options():
    """``DpdfdConfig`` repeats no default of ``DpdfdOptions``: a setting the user's options set is a required field of
    the engine's config, resolved by ``engine_option_settings`` (which sets every one of them)."""
    import dataclasses

    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.io.spec import InputSpec
    from dpconvert.methods.dpdfd_options import DpdfdOptions, engine_option_settings

    # amp: the option's None (the device's default) and "off" both resolve to the engine's None: the method maps them
    shared = {f.name for f in dataclasses.fields(DpdfdOptions)} & {f.name for f in dataclasses.fields(DpdfdConfig)} - {"amp"}
    with_default = {f.name for f in dataclasses.fields(DpdfdConfig) if f.name in shared and f.default is not dataclasses.MISSING}
    assert len(shared) >= 8 and with_default == set()
    assert set(engine_option_settings(DpdfdOptions(), InputSpec(1, 28, 28, 10))) == shared


def test_a_flag_whose_default_the_library_picks_can_be_turned_off_and_the_card_says_so(monkeypatch, cli):
    """`shrink_to_student` defaults to what the query source calls for: --no-shrink-to-student reaches the library as
    False, and the equivalent command of a Python conversion spells each explicit value."""
    from dpconvert.command_line import equivalent_command
    from dpconvert.methods.dpdfd_options import DpdfdOptions

    for flag, value in (("--no-shrink-to-student", False), ("--shrink-to-student", True)):
        seen = _captured(monkeypatch, cli, "convert", ["convert", "builtin:digits", "--out", "s.onnx", flag])["kwargs"]
        assert seen["shrink_to_student"] is value
    assert "shrink_to_student" not in _captured(monkeypatch, cli, "convert", ["convert", "builtin:digits", "--out", "s.onnx"])["kwargs"]
    assert equivalent_command(["t.pt"], "s.onnx", DpdfdOptions(shrink_to_student=False)).endswith("--no-shrink-to-student")
    assert equivalent_command(["t.pt"], "s.onnx", DpdfdOptions(shrink_to_student=True)).endswith(" --shrink-to-student")
    assert "shrink" not in equivalent_command(["t.pt"], "s.onnx", DpdfdOptions())
