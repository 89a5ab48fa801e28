"""Private-kNN and DP-SGD side by side in one run: same student, same data, same (ε, δ), same seed.

    pip install -e ".[bench]"
    python benchmarks/pknn_vs_dpsgd.py --seed 2 --json benchmarks/results/fmnist_pknn_vs_dpsgd.json

Runs ``run_pknn.py`` (the product's defaults) and then ``dpsgd_baseline.py``
(Opacus, its tuned settings: 5 epochs, batch 1 024, lr 2.0, clip 1.0) one after
the other, so neither shares the cores with the other, and writes one row with
both accuracies, both ε and which is ahead. Data: private = the 60k FMNIST
training set; Private-kNN's public queries = the first 5k test images;
evaluation = the other 5k (both methods).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import report  # benchmarks/_results.py (the script's folder is on sys.path)

HERE = Path(__file__).parent


def run(script: str, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "row.json"
        subprocess.run([sys.executable, str(HERE / script), *args, "--json", str(out)], check=True)
        return json.loads(out.read_text())[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--student", default="datalens_cnn")
    ap.add_argument("--dpsgd-epochs", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    common = ["--seed", str(a.seed), "--eps", str(a.eps), "--delta", str(a.delta), "--student", a.student]
    pknn = run("run_pknn.py", common)
    dpsgd = run("dpsgd_baseline.py", [*common, "--epochs", str(a.dpsgd_epochs)])
    row = {
        "seed": a.seed, "student": a.student, "delta": a.delta, "target_epsilon": a.eps,
        "private_knn": {k: pknn[k] for k in ("student_accuracy", "epsilon", "scope", "sigma2", "queries_answered", "wall_seconds", "peak_rss_mib")},
        "dp_sgd": {k: dpsgd.get(k) for k in ("student_accuracy", "epsilon", "noise_multiplier", "batch_size", "lr", "clip", "epochs", "wall_seconds", "peak_rss_mib")},
        "private_knn_ahead_by": pknn["student_accuracy"] - dpsgd["student_accuracy"],
        "command": "python benchmarks/pknn_vs_dpsgd.py " + " ".join(sys.argv[1:]),
    }
    report(row, a.json)


if __name__ == "__main__":
    main()
