"""The README's first command, measured: accuracy on all 1 797 digits and wall time per phase, over settings and seeds.

    python benchmarks/digits_default.py --seeds 0,1,2 --json benchmarks/results/digits_default.json
    python benchmarks/digits_default.py --batch-size 300000,100000,60000 --epochs 6,8 --seeds 0 --json benchmarks/results/digits_sweep.json

Each run is ``dpconvert.convert("builtin:digits", eps=1, ...)`` (the library behind ``dpconvert builtin:digits --eps 1
--out student.onnx``) with seeded noise, so a seed reproduces a row; unset options take the product's defaults.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

from _results import report


def run(batch_size, epochs, seed, eps):
    import dpconvert

    options = {k: v for k, v in dict(batch_size=batch_size, epochs=epochs).items() if v is not None}
    with tempfile.TemporaryDirectory() as d:
        r = dpconvert.convert("builtin:digits", out=Path(d) / "student.onnx", eps=eps, seed=seed, seeded_noise=True,
                              eval_data="builtin:digits:all", **options)
    c = r.card.data
    return {"job": "digits default", "epsilon": c["guarantee"]["epsilon"], "seed": seed, "batch_size": c["mechanism"]["batch_size"],
            "student_epochs": c["mechanism"]["config"]["student_epochs"], "student_accuracy_all_1797": c["utility"]["student_accuracy"],
            "wall_seconds": r.profile["wall_seconds"], "phase_seconds": r.profile["phase_seconds"], "peak_rss_mib": r.profile["peak_rss_mib"],
            "command": "python benchmarks/digits_default.py " + " ".join(sys.argv[1:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", default="", help="comma-separated B values (default: the product's)")
    ap.add_argument("--epochs", default="", help="comma-separated epoch counts (default: the product's)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    bs = [int(b) for b in args.batch_size.split(",") if b] or [None]
    eps_ = [int(e) for e in args.epochs.split(",") if e] or [None]
    for b, e, s in itertools.product(bs, eps_, [int(s) for s in args.seeds.split(",")]):
        report(run(b, e, s, args.eps), args.json)


if __name__ == "__main__":
    main()
