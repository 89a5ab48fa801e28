"""Scale-out rows: a resnet34 teacher at 3×224×224 on CPU, bf16 autocast on CPU, and two torchrun processes against one.

    python benchmarks/scale_out.py --job large --json benchmarks/results/scale_out.json
    python benchmarks/scale_out.py --job amp --json benchmarks/results/scale_out.json
    python benchmarks/scale_out.py --job torchrun --json benchmarks/results/scale_out.json

``large``: a 1 000-class timm resnet34 with random weights saved to a local file (the hubs are unreachable here; the
cost does not depend on the weights), converted with B = 512 and one epoch (the wall time, the peak memory and the
time per phase), and the up-front estimate of the default run (B and epochs from the device defaults), which is
stopped once estimated. ``amp``: the digits default with --amp off and bf16, seeded noise. ``torchrun``: the digits
default in one process and under ``torchrun --nproc_per_node 2`` (gloo), secret noise, all 1 797 digits.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import report


class _Estimated(Exception):
    pass


def large() -> list[dict]:
    import timm
    from safetensors.torch import save_file

    import dpconvert
    from dpconvert.io.teachers import LoadOptions

    rows = []
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "resnet34.safetensors"
        save_file(timm.create_model("resnet34", num_classes=1000).state_dict(), str(path))
        loader = LoadOptions(arch="timm:resnet34")
        estimate = {}

        def stop(info):
            if info["kind"] == "estimate":
                estimate.update(info)
                raise _Estimated

        try:
            dpconvert.convert(str(path), out=Path(d) / "default.onnx", eps=1, loader=loader, on_progress=stop)
        except _Estimated:
            pass
        t0 = time.perf_counter()
        r = dpconvert.convert(str(path), out=Path(d) / "s.onnx", eps=1, batch_size=512, epochs=1, loader=loader)
        wall = time.perf_counter() - t0
    run = r.card.data["run"]
    rows.append({"job": "resnet34 3×224×224 teacher, CPU", "batch_size": 512, "epochs": 1, "conversion_s": round(wall, 1),
                 "phase_seconds": run.get("phase_seconds"), "other_seconds": run.get("other_seconds"), "peak_rss_mib": run.get("peak_rss_mib"), "student": r.card.data["model"]["architecture"],
                 "command": "python benchmarks/scale_out.py --job large"})
    rows.append({"job": "resnet34 3×224×224 teacher, CPU: the default run's up-front estimate", **{k: v for k, v in estimate.items() if k != "kind"}})
    return rows


def amp() -> list[dict]:
    import dpconvert

    rows = []
    for mode in ("off", "bf16"):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            r = dpconvert.convert("builtin:digits", out=Path(d) / "s.onnx", eps=1, seed=0, seeded_noise=True, eval_data="builtin:digits:all", amp=mode)
            rows.append({"job": "digits default, CPU autocast", "amp": mode, "conversion_s": round(time.perf_counter() - t0, 1),
                         "student_accuracy_all_1797": r.card.data["utility"]["student_accuracy"],
                         "command": "python benchmarks/scale_out.py --job amp"})
    return rows


def torchrun() -> list[dict]:
    exe = shutil.which("dpconvert")
    rows = []
    for procs in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "s.onnx"
            cmd = [exe, "builtin:digits", "--eps", "1", "--eval-data", "builtin:digits:all", "--out", str(out)]
            if procs > 1:
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs), "--no-python", *cmd]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            card = json.loads(Path(f"{out}.card.json").read_text())
            rows.append({"job": "digits default, processes", "processes": procs, "wall_s": round(time.perf_counter() - t0, 1),
                         "epsilon": card["guarantee"]["epsilon"], "student_accuracy_all_1797": card["utility"]["student_accuracy"],
                         "command": "python benchmarks/scale_out.py --job torchrun"})
    return rows


JOBS = {"large": large, "amp": amp, "torchrun": torchrun}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", choices=sorted(JOBS), required=True)
    ap.add_argument("--json")
    a = ap.parse_args()
    for row in JOBS[a.job]():
        row["peak_rss_process_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        report(row, a.json)
