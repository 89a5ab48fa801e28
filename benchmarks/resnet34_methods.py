"""Every method on a deep ImageNet-style teacher: timm resnet34 trained on Fashion-MNIST as RGB.

    python benchmarks/train_fmnist_teachers.py --which resnet34 --epochs 2   # the teacher (3×64×64)
    python benchmarks/resnet34_methods.py --json benchmarks/results/resnet34_methods.json

Each run is the ``dpconvert`` command a user would type (printed and recorded with its result), under
``/usr/bin/time -v`` for the wall time and the peak RSS, with seeded noise (reproducible: benchmarks only). Queries
and evaluation as in the other Fashion-MNIST tables: public images = test images 0–4 999 (unlabelled), evaluation on
test images 5 000–9 999, private data = the 60 000 training images; every image is converted to the teacher's
3×64×64 RGB input one record at a time by the product's own reader.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import report  # benchmarks/_results.py (the script's folder is on sys.path)
from run_pknn import DATA, prepare

RUNS = {
    "dpdfd": [],  # data-free, every default
    "dpdfd-public": ["--public-data", "{public}", "--batch-size", "200000"],
    "dpsgd": ["--method", "dpsgd", "--private-data", "{private}"],
    "pknn": ["--method", "pknn", "--private-data", "{private}", "--public-data", "{public}"],
}


def run(name: str, teacher: str, eps: float, seed: int, data: dict, extra: list) -> dict:
    with tempfile.TemporaryDirectory() as d:
        args = ["dpconvert", teacher, "--eps", f"{eps:g}", "--delta", "1e-5", "--eval-data", data["evaluation"], "--seed", str(seed),
                "--seeded-noise", "--out", f"{d}/student.onnx", "--json", *[a.format(**data) for a in RUNS[name]], *extra]
        p = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{name} failed:\n{p.stderr[-3000:]}")
        card = json.loads(p.stdout)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", p.stderr).group(1)
    seconds = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024
    u, g, m = card["utility"], card["guarantee"], card["mechanism"]
    return {"run": name, "command": shlex.join(args).replace(d, "OUT"),
            "method": m["method"], "student": card["model"]["architecture"], "epsilon": g["epsilon"], "scope": g["scope"],
            "teacher_accuracy": u["teacher_accuracy"], "student_accuracy": u["student_accuracy"], "wall_seconds": round(seconds, 1),
            "peak_rss_mib": round(rss), "seed": seed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default="benchmarks/runs/fmnist_resnet34_64.safetensors")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra", default="", help="further dpconvert flags for every run (e.g. '--epochs 4')")
    ap.add_argument("--private", default=f"{DATA}:train", help="the private records (default: the Fashion-MNIST training set)")
    ap.add_argument("--public", help="public query images (default: Fashion-MNIST test images 0–4 999)")
    ap.add_argument("--evaluation", help="labelled evaluation images (default: Fashion-MNIST test images 5 000–9 999)")
    ap.add_argument("--json", help="append each result to this JSON list file")
    args = ap.parse_args()
    public, evaluation = (args.public, args.evaluation) if args.public and args.evaluation else prepare(Path(args.teacher).parent)
    data = {"private": args.private, "public": public, "evaluation": evaluation}
    for name in args.runs.split(","):
        row = run(name, args.teacher, args.eps, args.seed, data, shlex.split(args.extra))
        report(row, args.json)
    sys.exit(0)


if __name__ == "__main__":
    main()
