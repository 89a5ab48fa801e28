"""DPDFD utility/speed benchmark: convert a teacher at several ε, measure the student.

    python benchmarks/run_dpdfd.py --teacher builtin:digits --eval-data builtin:digits --eps 1,2,5,10,inf \
        --json benchmarks/results/digits.json

Each ε runs in its own process (so peak memory is per run) through the same
``dpconvert.pipeline.convert`` the CLI uses. ``inf`` means σ = 0 (no privacy,
the non-private data-free baseline). Reported per run: student/teacher test
accuracy and agreement, wall time, rows released per second, peak RSS, and
the share of time in teacher forward, student and generator/selection.
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


def single(args) -> dict:
    import torch

    from dpconvert import convert
    from dpconvert.io.teachers import LoadOptions

    torch.set_num_threads(max(1, torch.get_num_threads()))
    eps = float(args.eps)
    with tempfile.TemporaryDirectory() as d:
        options = {k: v for k, v in dict(releases=args.steps, batch_size=args.batch_size, generator=args.generator, prior=args.prior,
                                         epochs=args.epochs, public_targets=args.public_targets,
                                         prior_images=args.prior_images).items() if v is not None}
        t0 = time.perf_counter()
        res = convert(args.teacher, out=Path(d) / "student.onnx", eps=None if eps == float("inf") else eps, delta=args.delta,
                      no_privacy=eps == float("inf"), student=args.student, seed=args.seed, seeded_noise=True,
                      eval_data=args.eval_data, public_data=args.public_data, loader=LoadOptions(arch=args.arch) if args.arch else None,
                      **options, **json.loads(args.overrides or "{}"))
        wall = time.perf_counter() - t0
    card = res.card.data
    times = {"teacher": 0.0, "student": 0.0, "generator": 0.0}
    for r in res.rounds:
        for k, v in r.times.items():
            times[k] += v
    total = sum(times.values()) or 1.0
    rows = card["mechanism"]["batch_size"] * card["mechanism"]["releases"]
    return {
        "teacher": args.teacher, "target_eps": eps, "epsilon": card["guarantee"]["epsilon"], "delta": card["guarantee"]["delta"],
        "record_level_epsilon": card["guarantee"]["record_level_epsilon"], "sigma": card["mechanism"]["sigma"],
        "per_image_epsilon": card["guarantee"].get("per_image_epsilon"), "public_images": card["mechanism"].get("public_images"),
        "releases": card["mechanism"]["releases"], "batch_size": card["mechanism"]["batch_size"],
        "student": card["model"]["architecture"], "query_source": card["mechanism"]["query_source"],
        **{k: card["mechanism"]["config"][k] for k in ("distill_loss", "student_target", "student_epochs", "logit_adjust", "new_sources_per_release",
                                                       "student_data", "denoise", "student_samples")},
        **{k: card["utility"][k] for k in ("teacher_accuracy", "student_accuracy", "agreement", "evaluation_data")},
        "wall_seconds": round(wall, 1), "rows_per_second": round(rows / wall, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "time_share": {k: round(v / total, 3) for k, v in times.items()},
        "seed": args.seed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default="builtin:digits")
    ap.add_argument("--arch")
    ap.add_argument("--eval-data", default="builtin:digits")
    ap.add_argument("--eps", default="1,2,5,10,inf")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--prior", default=None, help="data-free query prior (generators.PRIORS; default from the input size)")
    ap.add_argument("--epochs", type=int, default=None, help="student epochs (default: the pipeline's, from the input size)")
    ap.add_argument("--student")
    ap.add_argument("--generator")
    ap.add_argument("--public-data", help="unlabelled public images as the query source (labelled option, not data-free)")
    ap.add_argument("--public-targets", help="with --public-data: per-image (default) or rows")
    ap.add_argument("--prior-images", type=int, help="data-free per-image targets over this many fixed prior images")
    ap.add_argument("--overrides", help="JSON dict of further DPDFD options, e.g. the Python-only new_sources_per_release, logit_adjust, student_lr")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delta", type=float, help="δ (default: the product's, one over the released rows; the DPDFD paper reports 1e-5)")
    ap.add_argument("--json", help="append results to this JSON list file")
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.single:
        print("RESULT " + json.dumps(single(args)), flush=True)
        return
    results = []
    for eps in args.eps.split(","):
        cmd = [sys.executable, __file__, "--single", "--eps", eps] + [
            a for k, v in vars(args).items() if k not in ("eps", "single", "json") and v is not None
            for a in (f"--{k.replace('_', '-')}", str(v))
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"run at eps={eps} failed:\n{proc.stderr[-2000:]}")
        r = json.loads(line[len("RESULT "):])
        r["command"] = " ".join(["python", "benchmarks/run_dpdfd.py"] + sys.argv[1:])
        results.append(r)
        append_row(r, args.json)  # as we go: a later failure keeps the finished runs
        print(f"eps={eps}: student {r['student_accuracy']:.4f} (teacher {r['teacher_accuracy']:.4f}), ε={r['epsilon']}, "
              f"{r['wall_seconds']} s, {r['rows_per_second']} rows/s, peak {r['peak_rss_mib']} MiB, shares {r['time_share']}", flush=True)


if __name__ == "__main__":
    main()
