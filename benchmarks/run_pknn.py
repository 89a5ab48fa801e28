"""Private-kNN benchmark on Fashion-MNIST (issue: record-level ε ≤ 1).

    python benchmarks/run_pknn.py --json benchmarks/results/fmnist_pknn.json

Private = the 60k training set; public queries = the first 5k test images
(labels dropped); evaluation = the other 5k test images. The teacher file only
supplies the input spec (train it with benchmarks/train_fmnist_teachers.py).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from _results import report  # benchmarks/_results.py (the script's folder is on sys.path)

import numpy as np

from dpconvert.io.data import read_raw

DATA = "/usr/share/datasets/fashion-mnist"


def prepare(runs: Path) -> tuple[str, str]:
    test = read_raw(DATA)
    public, evaluation = runs / "fmnist_public_first5k.npz", runs / "fmnist_eval_last5k.npz"
    if not public.exists():
        np.savez_compressed(public, x=(test.pixels[:5000] * 255).round().astype(np.uint8))  # no labels: public, unlabelled
        np.savez_compressed(evaluation, x=(test.pixels[5000:] * 255).round().astype(np.uint8), y=test.labels[5000:])
    return str(public), str(evaluation)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default="benchmarks/runs/fmnist_cnn.safetensors")
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    # unset options take the product's defaults (PknnOptions)
    ap.add_argument("--k", type=int)
    ap.add_argument("--sampling-rate", type=float)
    ap.add_argument("--sigma1", type=float)
    ap.add_argument("--threshold", type=float)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--queries", type=int)
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--student")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--features")
    ap.add_argument("--labels", choices=["hard", "soft"])
    ap.add_argument("--label-temperature", type=float)
    ap.add_argument("--config", help="JSON dict of other PknnOptions fields, e.g. '{\"labels\": \"hard\"}'")
    ap.add_argument("--json")
    args = ap.parse_args()
    import sys
    import tempfile

    import torch

    from dpconvert import convert

    torch.set_num_threads(max(1, torch.get_num_threads()))
    runs = Path("benchmarks/runs")
    runs.mkdir(parents=True, exist_ok=True)
    public, evaluation = prepare(runs)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        options = {k: v for k, v in dict(k=args.k, sampling_rate=args.sampling_rate, sigma1=args.sigma1, threshold=args.threshold,
                                         rounds=args.rounds, queries=args.queries, epochs=args.epochs, features=args.features,
                                         labels=args.labels, label_temperature=args.label_temperature).items() if v is not None}
        res = convert(args.teacher, out=Path(d) / "student.onnx", eps=args.eps, delta=args.delta, method="pknn", private_data=f"{DATA}:train",
                      public_data=public, eval_data=evaluation, student=args.student, seed=args.seed, seeded_noise=True,
                      **options, **json.loads(args.config or "{}"))
        wall = time.perf_counter() - t0
    c = res.card.data
    r = {
        "method": "private-knn", "epsilon": c["guarantee"]["epsilon"], "delta": args.delta, "scope": c["guarantee"]["scope"],
        "accountants": c["accounting"]["epsilons"], **{k: c["mechanism"][k] for k in ("k", "sampling_rate", "sigma1", "threshold", "sigma2", "queries_asked", "queries_answered", "rounds")},
        "features": c["mechanism"]["config"]["features"], "labels": c["mechanism"]["config"]["labels"],
        "label_temperature": c["mechanism"]["config"]["label_temperature"], "config": c["mechanism"]["config"],
        "student": c["model"]["architecture"], "student_accuracy": c["utility"]["student_accuracy"], "evaluation_data": c["utility"]["evaluation_data"],
        "rounds_detail": res.rounds, "wall_seconds": round(wall, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "command": "python benchmarks/run_pknn.py " + " ".join(sys.argv[1:]),
    }
    report(r, args.json)


if __name__ == "__main__":
    main()
