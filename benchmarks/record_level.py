"""Record-level methods side by side on Fashion-MNIST: DP-SGD, AdLM and Private-kNN through the product's Python API.

    python benchmarks/record_level.py --methods dpsgd adlm pknn --eps 0.5 1 2 4 --seeds 0 1 2 \\
        --json benchmarks/results/fmnist_record_level.json

Private data = the 60 000 training images (labelled); evaluation = test images 5 000–9 999; Private-kNN's public
queries = test images 0–4 999 (unlabelled). δ = 1e-5 (AdLM: 0). Each run is its own process, so the wall time and
peak memory are the run's own; the noise is seeded (``seeded_noise``) so that each row can be reproduced — a
release would use the default secret noise, which changes nothing else. Options left out take the product's
defaults; ``--config`` passes others as JSON (e.g. '{"relevance_power": 0}').
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import append_row  # benchmarks/_results.py (the script's folder is on sys.path)

DATA = "/usr/share/datasets/fashion-mnist"
TEACHER = "benchmarks/runs/fmnist_cnn.safetensors"


def one_run(method: str, eps: float, seed: int, config: dict) -> dict:
    """Runs in a child process (``--one``): the conversion, then a row with its accuracy, time and memory."""
    from run_pknn import prepare

    from dpconvert import convert

    public, evaluation = prepare(Path("benchmarks/runs"))
    extra = {"public_data": public} if method == "pknn" and "query_generator" not in config else {}
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = convert(TEACHER, out=Path(d) / "student.onnx", method=method, eps=eps, private_data=f"{DATA}:train", eval_data=evaluation,
                      seed=seed, seeded_noise=True, **extra, **config)
        wall = time.perf_counter() - t0
    c = res.card.data
    return {
        "method": method, "target_epsilon": eps, "epsilon": c["guarantee"]["epsilon"], "delta": c["guarantee"]["delta"],
        "scope": c["guarantee"]["scope"], "record_level_epsilon": c["guarantee"]["record_level_epsilon"], "seed": seed,
        "student": c["model"]["architecture"], "student_accuracy": c["utility"]["student_accuracy"],
        "evaluation_data": "fashion-mnist test images 5000..9999", "config": c["mechanism"].get("config"),
        "wall_seconds": round(wall, 1), "phase_seconds": res.profile["phase_seconds"],
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["dpsgd", "adlm", "pknn"])
    ap.add_argument("--eps", nargs="+", type=float, default=[0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--config", default="{}", help="JSON dict of method options for every run")
    ap.add_argument("--json")
    ap.add_argument("--one", nargs=3, metavar=("METHOD", "EPS", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    config = json.loads(args.config)
    if args.one:
        print(json.dumps(one_run(args.one[0], float(args.one[1]), int(args.one[2]), config)))
        return
    command = "python benchmarks/record_level.py " + " ".join(sys.argv[1:])
    for method in args.methods:
        for eps in args.eps:
            for seed in args.seeds:
                out = subprocess.run([sys.executable, __file__, "--one", method, str(eps), str(seed), "--config", args.config],
                                     capture_output=True, text=True, check=True).stdout
                row = {**json.loads(out.strip().splitlines()[-1]), "command": command}
                print(f"{method} ε={eps:g} seed {seed}: accuracy {row['student_accuracy']:.4f} (ε {row['epsilon']:.4f}), "
                      f"{row['wall_seconds']:.0f} s, {row['peak_rss_mib']:.0f} MiB", flush=True)
                append_row(row, args.json)


if __name__ == "__main__":
    main()
