"""What the privacy machinery costs: each DPDFD conversion phase against a bare loop doing the same arithmetic.

    python benchmarks/overhead.py --job digits --json benchmarks/results/overhead.json
    python benchmarks/overhead.py --job fmnist --json benchmarks/results/overhead.json      # needs benchmarks/runs/fmnist_cnn.safetensors

The conversion runs through ``dpconvert.convert`` (its profile gives the time per phase). The bare loop draws the same
number of prior queries, runs the same teacher forward and trains the same student for the same epochs on the
teacher's raw logits (plain distillation: no distinct-input check, no normalisation, no noise, no accountant, no
card, no ONNX export). Overhead = (conversion − bare) / bare, over the phases both have, and over the whole run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _results import report

JOBS = {
    "digits": dict(teacher="builtin:digits", loader=None),
    "fmnist": dict(teacher="benchmarks/runs/fmnist_cnn.safetensors", loader=dict(arch="wide_cnn", num_classes=10, input_size=(1, 28, 28))),
}


def bare_loop(teacher, spec, batch_size: int, epochs: int, seed: int) -> dict:
    """The same queries, teacher forward and student epochs, without any privacy machinery."""
    import math

    import torch

    from dpconvert.generators import create_generator, default_prior_name
    from dpconvert.mechanisms.dpdfd import TEACHER_BATCH
    from dpconvert.methods.dpdfd import RELEASE_ROWS_DEFAULT
    from dpconvert.students import create_student, default_student_name

    torch.manual_seed(seed)
    rng = torch.Generator().manual_seed(seed)
    t = {}
    t0 = time.perf_counter()
    prior = create_generator(default_prior_name(spec), spec)
    with torch.no_grad():
        z = torch.randn(batch_size, prior.nz, generator=rng)
        x = torch.cat([prior(c) for c in z.split(4096)])
    t["queries"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.inference_mode():
        y = torch.cat([teacher(c) for c in x.split(TEACHER_BATCH)])
    t["teacher forward"] = time.perf_counter() - t0
    y = y.clone()
    student = create_student(default_student_name(spec), spec)
    opt = torch.optim.Adam(student.parameters(), lr=2e-3)
    steps, n = epochs * math.ceil(len(x) / RELEASE_ROWS_DEFAULT), 0
    t0 = time.perf_counter()
    student.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=rng).split(RELEASE_ROWS_DEFAULT):
            for g in opt.param_groups:
                g["lr"] = 2e-3 * 0.5 * (1 + math.cos(math.pi * n / steps))
            out = student(x[idx])
            loss = 0.5 * (out - out.mean(1, keepdim=True) - (y[idx] - y[idx].mean(1, keepdim=True))).pow(2).sum(1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            n += 1
    t["student training"] = time.perf_counter() - t0
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", choices=sorted(JOBS), default="digits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    import dpconvert
    from dpconvert.io.teachers import LoadOptions, load_teacher

    job = JOBS[args.job]
    loader = LoadOptions(**job["loader"]) if job["loader"] else None
    with tempfile.TemporaryDirectory() as d:
        r = dpconvert.convert(job["teacher"], out=Path(d) / "s.onnx", eps=1, seed=args.seed, seeded_noise=True, loader=loader)
    m = r.card.data["mechanism"]
    teacher = load_teacher(job["teacher"], loader or LoadOptions())
    bare = bare_loop(teacher, teacher.spec, m["batch_size"], m["config"]["student_epochs"], args.seed)
    conv = r.profile["phase_seconds"]
    shared = sum(bare.values())
    dp = conv.get("queries", 0) + conv.get("teacher forward", 0) + conv.get("release", 0) + conv.get("student training", 0)
    report({
        "job": f"overhead, {args.job} DPDFD default", "device": "cpu", "torch_threads": torch.get_num_threads(),
        "batch_size": m["batch_size"], "student_epochs": m["config"]["student_epochs"],
        "conversion_phase_seconds": conv, "conversion_wall_seconds": r.profile["wall_seconds"], "bare_loop_seconds": {k: round(v, 2) for k, v in bare.items()},
        "privacy_machinery_seconds": round(conv.get("release", 0) + (conv.get("queries", 0) - bare["queries"]), 2),
        "overhead_on_shared_phases": round((dp - shared) / shared, 3),
        "overhead_whole_run": round((r.profile["wall_seconds"] - shared) / shared, 3),
        "command": "python benchmarks/overhead.py " + " ".join(sys.argv[1:]),
    }, args.json)


if __name__ == "__main__":
    main()
