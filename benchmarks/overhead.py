"""What the privacy machinery costs: each conversion phase against a bare loop doing the same arithmetic.

    python benchmarks/overhead.py --job digits --json benchmarks/results/overhead.json
    python benchmarks/overhead.py --job fmnist --json benchmarks/results/overhead.json       # needs benchmarks/runs/fmnist_cnn.safetensors
    python benchmarks/overhead.py --job fmnist-pknn --json benchmarks/results/overhead.json  # and the public/eval splits of run_pknn.py

DPDFD: the conversion runs through ``dpconvert.convert`` (its profile gives the time per phase). The bare loop draws
the same number of prior queries, runs the same teacher forward and trains the same student for the same epochs on
the teacher's raw logits (plain distillation: no distinct-input check, no normalisation, no noise, no accountant, no
card, no ONNX export). Private-kNN: the bare loop computes the same features, a plain k-NN vote over every private
record for each query twice (screening and argmax: no Poisson mask, no noise, no accountant) and trains the same
student for the same epochs on the answered queries' plain votes. Overhead = (conversion − bare) / bare over the
phases both have; the whole run (loading, export, card) is reported beside it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _results import report

FMNIST = "/usr/share/datasets/fashion-mnist"
JOBS = {
    "digits": dict(teacher="builtin:digits", eval_data="builtin:digits:all"),
    "fmnist": dict(teacher="benchmarks/runs/fmnist_cnn.safetensors", eval_data=FMNIST, prior_images=0),  # one target per prior sample (RESULTS table 2)
    "fmnist-pknn": dict(teacher="benchmarks/runs/fmnist_cnn.safetensors", eval_data="benchmarks/runs/fmnist_eval_last5k.npz",
                        method="pknn", private_data=f"{FMNIST}:train", public_data="benchmarks/runs/fmnist_public_first5k.npz"),
}
SHARED = ("queries", "teacher forward", "release", "student training", "features", "kNN votes")


def bare_loop(teacher, spec, batch_size: int, epochs: int, seed: int) -> dict:
    """The same queries, teacher forward and student epochs, without any privacy machinery."""
    import math

    import torch

    from dpconvert.generators import create_generator, default_prior_name
    from dpconvert.distill.models import TEACHER_BATCH, nhwc
    from dpconvert.methods.dpdfd_options import RELEASE_ROWS_DEFAULT, default_student_lr
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
    student = create_student(default_student_name(spec), spec).to(memory_format=torch.channels_last)  # the engine's layout
    lr = default_student_lr(spec)
    opt = torch.optim.Adam(student.parameters(), lr=lr)
    steps, n = epochs * math.ceil(len(x) / RELEASE_ROWS_DEFAULT), 0
    t0 = time.perf_counter()
    student.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=rng).split(RELEASE_ROWS_DEFAULT):
            for g in opt.param_groups:
                g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * n / steps))
            out = student(nhwc(x[idx]))
            loss = 0.5 * (out - out.mean(1, keepdim=True) - (y[idx] - y[idx].mean(1, keepdim=True))).pow(2).sum(1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            n += 1
    t["student training"] = time.perf_counter() - t0
    return t


def bare_pknn(run_card: dict, job: dict, teacher_spec, seed: int) -> dict:
    """Private-kNN's arithmetic without the mechanism, round by round: the same features (the first map, then the
    student's), a plain k-NN vote over every private record twice per query (no Poisson mask, no noise, no
    accountant), the same student training."""
    import torch

    from dpconvert.io.data import load_data
    from dpconvert.distill.features import batched_features, create_features
    from dpconvert.mechanisms.private_knn import student_features, train_classifier
    from dpconvert.mechanisms.private_knn import combine_features
    from dpconvert.methods.pknn_options import PknnOptions
    from dpconvert.students import create_student, default_student_name

    m = run_card["mechanism"]
    private = load_data(job["private_data"], teacher_spec, require_labels=True)
    public = load_data(job["public_data"], teacher_spec)
    opts = PknnOptions()
    k, epochs, rounds = m["k"], m["config"]["epochs"], m["rounds"]
    y = torch.randint(0, teacher_spec.num_classes, (len(public),), generator=torch.Generator().manual_seed(seed))
    t = {"features": 0.0, "kNN votes": 0.0, "student training": 0.0}
    student, pfirst = None, None
    per_round = torch.arange(len(public)).tensor_split(rounds)
    for r, idx in enumerate(per_round):
        t0 = time.perf_counter()
        if student is None:
            phi = create_features(m["config"]["features"], teacher_spec, public.x)
            pf = pfirst = batched_features(phi, private.x)
            qf = batched_features(phi, public.x[idx])
        else:
            ps = student_features(student)
            pf = combine_features(opts, pfirst, batched_features(ps, private.x))
            qf = combine_features(opts, batched_features(phi, public.x[idx]), batched_features(ps, public.x[idx]))
        t["features"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(2):  # screening and argmax each vote once per query
            for q in qf.split(256):
                torch.nn.functional.one_hot(private.y[torch.cdist(q, pf).topk(k, largest=False).indices], teacher_spec.num_classes).sum(1)
        t["kNN votes"] += time.perf_counter() - t0
        answered = int(m["queries_answered"] * (r + 1) / rounds)
        student = create_student(default_student_name(teacher_spec), teacher_spec)
        t0 = time.perf_counter()
        train_classifier(student, public.x[:answered], y[:answered], epochs=epochs, lr=2e-3, minibatch=128, generator=torch.Generator().manual_seed(seed))
        t["student training"] += time.perf_counter() - t0
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

    job = dict(JOBS[args.job])
    teacher_file = job.pop("teacher")
    with tempfile.TemporaryDirectory() as d:
        r = dpconvert.convert(teacher_file, out=Path(d) / "s.onnx", eps=1, seed=args.seed, seeded_noise=True, **job)
    card = r.card.data
    teacher = load_teacher(teacher_file, LoadOptions())
    if card["mechanism"]["method"] == "dpdfd":
        bare = bare_loop(teacher, teacher.spec, card["mechanism"]["batch_size"], card["mechanism"]["config"]["student_epochs"], args.seed)
    else:
        bare = bare_pknn(card, job, teacher.spec, args.seed)
    conv = r.profile["phase_seconds"]
    shared = sum(bare.values())
    dp = sum(conv.get(p, 0) for p in SHARED)
    report({
        "job": f"overhead, {args.job} default", "device": "cpu", "torch_threads": torch.get_num_threads(), "epsilon": card["guarantee"]["epsilon"],
        "student_accuracy": card["utility"]["student_accuracy"], "evaluation_data": card["utility"]["evaluation_data"],
        "conversion_phase_seconds": conv, "conversion_wall_seconds": r.profile["wall_seconds"], "peak_rss_mib": r.profile["peak_rss_mib"],
        "bare_loop_seconds": {k: round(v, 2) for k, v in bare.items()},
        "overhead_on_shared_phases": round((dp - shared) / shared, 3),
        "overhead_whole_run": round((r.profile["wall_seconds"] - shared) / shared, 3),
        "command": "python benchmarks/overhead.py " + " ".join(sys.argv[1:]),
    }, args.json)


if __name__ == "__main__":
    main()
