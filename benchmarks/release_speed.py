"""Where a data-free release's time goes, per row, on the engine the product builds: the queries (rendered and hashed to
keep them distinct), the teacher phase one teacher call at a time against the release's groups of calls
(``distill/models.CALLS_PER_GROUP``), the sampling grid against ``F.affine_grid``, and what the estimate (console:
median over 0.5 s; time budget: ``profiling.sustained_seconds``) says per row against what the engine then takes.

    python benchmarks/release_speed.py --teacher benchmarks/runs/fmnist_cnn2.safetensors --rows 200000 \\
        --json benchmarks/results/release_speed.json
    python benchmarks/release_speed.py --teacher builtin:digits --rows 3000        # what the smoke test runs

Nothing is released: the conversion stops once the engine is built (its estimate is where the product hands it over).
"""

from __future__ import annotations

import argparse
import time

import torch
from _results import report


class _Measured(Exception):
    pass


def _per_row(fn, rows: int) -> float:
    t0 = time.perf_counter()
    fn()
    return round((time.perf_counter() - t0) / rows * 1e6, 2)


def measure(job, estimate, rows: int) -> dict:
    """µs per row of each phase on ``rows`` fresh rows of the run's own query source (``estimate``: the engine's)."""
    from dpconvert.profiling import median_seconds, sustained_seconds

    out = {}
    for name, timing in (("console", median_seconds), ("budget", sustained_seconds)):
        est = estimate(job, timing=timing)
        b = job.cfg.batch_size * job.cfg.releases
        out[f"estimate_{name}_us_per_row"] = {"queries": round(est["queries_seconds"] / b * 1e6, 2), "teacher": round(est["teacher_seconds"] / b * 1e6, 2)}
    state = job.rng.get_state()
    draw = job.distinct_prior_draws if job.store_z else job.distinct_queries
    holder = {}
    out["queries_us_per_row"] = _per_row(lambda: holder.setdefault("rows", draw(rows)), rows)
    z = holder["rows"]
    group = job.group
    for calls, size in (("one_call", job.chunk), ("group", group)):
        job.group = size
        out[f"teacher_phase_{calls}_us_per_row"] = _per_row(lambda: job._noisy_rows(z), rows)
    job.group = group
    job.rng.set_state(state)
    out.update(rows_per_call=job.chunk, rows_per_group=group)
    return out


def grid_us_per_view(shape: tuple, n: int = 682, repeats: int = 20) -> dict:
    import torch.nn.functional as F

    from dpconvert.generators.sampling_grid import affine_grid

    theta = torch.randn(n, 2, 3)
    h, w = shape[1], shape[2]
    res = {}
    for name, fn in (("torch_affine_grid", lambda: F.affine_grid(theta, [n, shape[0], h, w], align_corners=False)),
                     ("sampling_grid", lambda: affine_grid(theta, h, w))):
        fn()
        res[name] = _per_row(lambda: [fn() for _ in range(repeats)], n * repeats)
    return res


def main() -> None:
    import tempfile
    from pathlib import Path

    import dpconvert
    from dpconvert.mechanisms.dpdfd import Dpdfd

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", default="builtin:digits")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    found = {}

    def hand_over(job, *a, **k):  # the product's engine, built and checked; measured here instead of released
        found.update(measure(job, original, args.rows), input=list(job.probe_inputs(1).shape[1:]))
        raise _Measured

    Dpdfd.estimate, original = hand_over, Dpdfd.estimate
    try:
        with tempfile.TemporaryDirectory() as d:
            dpconvert.convert(args.teacher, out=Path(d) / "unused.onnx", eps=1.0, seed=0, batch_size=max(args.rows, 1000),
                              on_progress=lambda event: None)
    except _Measured:
        pass
    finally:
        Dpdfd.estimate = original
    found["grid_us_per_view"] = grid_us_per_view(tuple(found["input"]))
    report({"job": "release speed", "teacher": args.teacher, "rows": args.rows, **found, "threads": 2,
            "command": f"python benchmarks/release_speed.py --teacher {args.teacher} --rows {args.rows}"}, args.json)


if __name__ == "__main__":
    main()
