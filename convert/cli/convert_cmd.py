"""``dpconvert convert`` (the main job, also ``dpconvert TEACHER …``) and ``dpconvert synth`` (a DP synthetic data set).

Both are generated from the options classes (``generated.py``): the teacher's (``LoadOptions``), the run's
(``RunOptions``) and every registered method's, so each flag, its help and its default are declared once, beside the
option it sets.
"""

from __future__ import annotations

import inspect
import shlex
import sys
from pathlib import Path

from dpconvert.errors import DpconvertError
from dpconvert.io.teachers import LoadOptions
from dpconvert.methods import METHODS, method_order
from dpconvert.methods.dpgan import GanOptions
from dpconvert.option_fields import DATA, OUTPUT, PRIVACY
from dpconvert.options import RunOptions

from .app import app, method_help
from .console import out
from .generated import build, given, own, params_of, retitled

METHOD_OPTIONS = tuple(METHODS.get(name).Options for name in method_order())


START = "Start here"  # the panel a new user reads first: what every conversion is about
FIRST = ("eps", "method", "private_data")  # RunOptions shown in it, after the teacher and --out


def _convert_params() -> list:
    run_params = params_of(RunOptions)  # `device` is declared as a flag once, on LoadOptions (the Teacher panel), and passed to both
    first = [p for name in FIRST for p in run_params if p.name == name]
    for p in first:
        p.panel = START
    params = [own("teacher", argument=True, default=..., type=list[str],
                  help="Teacher: a file (.pt/.pth/.pt2/.safetensors/.onnx), timm:NAME or builtin:digits. Several teachers (files, a folder, "
                       "a .txt list) for DPDFD: their rows are averaged (see --disjoint-partitions)."),
              own("out_path", "--out", "-o", type=Path, default=Path("student.onnx"), panel=START,
                  help="Output student, an .onnx file; the card goes to OUT.card.json / OUT.card.md. Default: student.onnx."),
              *first,
              *params_of(LoadOptions),  # then the Teacher panel: what a new user has to get right
              own("as_json", "--json", type=bool, default=False, panel=OUTPUT, help="Print the card as JSON at the end instead of the summary table."),
              own("profile", type=bool, default=False, panel=OUTPUT,
                  help="Add throughput (teacher queries/s, student samples/s, …) to the summary; the time per phase is shown and on the "
                       "card's run block unless private data was read."),
              own("show_timings", type=bool, default=False, panel=OUTPUT,
                  help="With private data, show the time per phase and the elapsed time anyway: they grow with the private set's size, so "
                       "keep such output out of public logs. Never written to the card."),
              *(p for p in run_params if p.name not in FIRST),
              *params_of(*METHOD_OPTIONS)]
    retitled(params, "method", help=method_help() + " Record-level methods need `private_data`.")
    return params


CONVERT = _convert_params()


def _convert(values: dict) -> None:
    from dpconvert.api import convert as run_convert

    from .console import err as err_console
    from .render import ProgressReporter, print_summary

    run, load = given(CONVERT, values, RunOptions), given(CONVERT, values, LoadOptions)
    if "device" in load:
        run["device"] = load["device"]
    show_timings = values["show_timings"]
    show_time = show_timings or run.get("private_data") is None  # a run on private data shows no durations unless asked (--show-timings)
    reporter = ProgressReporter(err_console if values["as_json"] else out, show_time)  # stdout carries only the card under --json
    try:
        result = run_convert(values["teacher"], out=values["out_path"], command="dpconvert " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                             loader=LoadOptions(**load), on_plan=reporter.plan, on_progress=reporter.tick, **run,
                             **given(CONVERT, values, *METHOD_OPTIONS))
    finally:
        reporter.close()
    if result is None:  # a torchrun rank other than 0: rank 0 writes and reports
        return
    if values["as_json"]:
        print(result.card.to_json())
        return
    print_summary(result, throughput=values["profile"], show_timings=show_timings)


build(app, "convert", CONVERT, _convert,
      "Convert TEACHER into a DP student (DPDFD, Private-kNN, DP-SGD or AdLM) with an ONNX export and a privacy card.")


# ------------------------------------------------------------------ synth
def _synth_params() -> list:
    from dpconvert.synth import synthesize

    defaults = inspect.signature(synthesize).parameters
    params = [*params_of(RunOptions, only={"private_data"}),
              own("out_path", "--out", "-o", type=Path, default=..., panel=OUTPUT,
                  help="The synthetic data set, an .npz (x: uint8 N×C×H×W, y); its card goes to OUT.card.json."),
              own("input_size", default=..., panel=DATA, help="Image size C,H,W of the data set (declared: never read from the data)."),
              own("num_classes", type=int, default=..., panel=DATA, help="Number of classes (declared: never read from the data)."),
              *params_of(RunOptions, only={"eps", "delta", "allow_large_delta", "seed", "seeded_noise", "pixel_range", "class_names", "sign_key", "force"}),
              own("samples", type=int, default=defaults["samples"].default, panel=OUTPUT,
                  help=f"Synthetic images to write (class-balanced). Default: {defaults['samples'].default}."),
              own("grid", type=Path, panel=OUTPUT, help="Also write a PNG grid of samples, one row per class."),
              own("ex_post", type=bool, default=False, panel=OUTPUT,
                  help="Also publish the ex-post expected privacy-loss estimate (\"Generating Artificial Data for Private Deep Learning\") in "
                       "the card's empirical block: computed on the private records outside the DP accounting, not DP (the card warns)."),
              *params_of(GanOptions, panel=PRIVACY, prefix="gan_")]  # named as Private-kNN's `gan_*`, and so are their errors
    retitled(params, "private_data", required=True)
    retitled(params, "seed", help="Seed for everything but the DP noise (the generator's initialisation, which samples are written); the "
             "noise is secret unless `seeded_noise`. Default: 0.")
    retitled(params, "force", help="Replace an existing data set, its card and its sample grid.")
    retitled(params, "eps", default_text=f"{defaults['eps'].default:g}")
    retitled(params, "delta", default_text=f"{defaults['delta'].default:g}")
    return params


SYNTH = _synth_params()


def _synth(values: dict) -> None:
    from dpconvert.io.spec import parse_size
    from dpconvert.synth import synthesize

    from .render import ProgressReporter, print_synth_summary

    run = given(SYNTH, values, RunOptions)
    gan = {k[len("gan_"):]: v for k, v in given(SYNTH, values, GanOptions).items()}
    out_path, samples, grid = values["out_path"], values["samples"], values["grid"]
    gan_opts = GanOptions(**gan)
    from . import console

    console.QUIET or out.print(f"DP-critic GAN ({gan_opts.critic} critic) on the private records, calibrated to record-level ε = {run.get('eps', 1.0):g}; "
              f"{samples} class-balanced samples to {out_path}", markup=False)
    reporter = ProgressReporter(out, show_time=False)  # it reads private data: durations grow with its size
    stages: dict = {}

    def progress(info: dict) -> None:  # the GAN reports (stage, step, total): one bar per stage
        if info["stage"] not in stages:
            stages[info["stage"]] = 0
            reporter.tick({"kind": "phase", "name": f"DP-critic GAN: {info['stage']}", "total": info["total"], "unit": "steps"})
        reporter.tick({"kind": "advance", "done": info["releases"] - stages[info["stage"]]})
        stages[info["stage"]] = info["releases"]

    try:
        card = synthesize(run.pop("private_data"), out=out_path, input_size=parse_size(values["input_size"]), num_classes=values["num_classes"],
                          samples=samples, grid=grid, gan=gan_opts, ex_post=values["ex_post"],
                          command="dpconvert " + " ".join(shlex.quote(a) for a in sys.argv[1:]), on_progress=progress, **run)
    finally:
        reporter.close()
    print_synth_summary(card, out_path, samples, grid)


build(app, "synth", SYNTH, _synth,
      "Release a DP synthetic data set: a GAN with a DP critic trained on --private-data, its samples and a card.")

__all__ = ["CONVERT", "SYNTH", "DpconvertError"]
