"""DPDFD with n teachers on disjoint partitions of Fashion-MNIST: the record-level bound at ε = 1 and 8.

    python benchmarks/disjoint_teachers.py --partitions 10,50,250 --eps 1,8 --json benchmarks/results/disjoint_teachers.json

The 60 000 training images (the private data) are split by a seeded permutation into n disjoint parts; one small
CNN (``TinyCNN`` below, 29 k parameters, non-private: these are the sensitive teachers; 250 of them answer 10 000 rows
in ~35 s on 2 cores) is trained on each and saved as a torch.export program in ``benchmarks/runs/partitions_n{n}_…/``. Then the ``dpconvert`` command a user types distils the folder with
``--disjoint-partitions n`` (record-level ε), querying the 5 000 public images (test images 0–4 999, unlabelled;
per-image targets), evaluated on test images 5 000–9 999, seeded noise, under ``/usr/bin/time -v``. Each row records
the mean teacher's and the teachers' ensemble accuracy beside the student's. ``--batch-size`` sets B: the student's
total signal, rows·(1/σ²) = n²μ²/4, does not depend on it, and the teachers' forward passes grow with n·B.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from _results import report  # benchmarks/_results.py (the script's folder is on sys.path)
from run_pknn import DATA, prepare

class TinyCNN(torch.nn.Module):
    """Two strided convolutions and a linear layer: small enough that hundreds of teachers answer in seconds."""

    def __init__(self, channels: int, size: int, classes: int) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(channels, 16, 5, stride=2, padding=2)
        self.c2 = torch.nn.Conv2d(16, 32, 5, stride=2, padding=2)
        self.fc = torch.nn.Linear(32 * ((size + 3) // 4) ** 2, classes)

    def forward(self, x):
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).flatten(1))


def train_partition_teachers(n: int, folder: Path, min_epochs: int, private: str, spec, seed: int = 0) -> dict:
    """n teachers, one per disjoint part of the training set (skipped when the folder already holds n)."""
    from dpconvert.io.data import load_data

    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob("teacher_*.pt2"))) == n:
        return json.loads((folder / "teachers.json").read_text())
    SPEC = spec
    train = load_data(private, SPEC, require_labels=True)
    parts = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed)).chunk(n)
    t0 = time.time()
    for i, idx in enumerate(parts):
        torch.manual_seed(seed + i)
        model = TinyCNN(SPEC.channels, SPEC.height, SPEC.num_classes)
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        epochs = max(min_epochs, 9600 // len(idx))  # small parts get more passes (≥ 9 600 samples each)
        g = torch.Generator().manual_seed(seed + i)
        model.train()
        for _ in range(epochs):
            for b in idx[torch.randperm(len(idx), generator=g)].split(64):
                loss = F.cross_entropy(model(train.x[b]), train.y[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
        model.eval()
        batch = torch.export.Dim("batch", min=1, max=1 << 20)
        program = torch.export.export(model, (train.x[:2],), dynamic_shapes={"x": {0: batch}})
        torch.export.save(program, str(folder / f"teacher_{i:04d}.pt2"))
    info = {"partitions": n, "records_per_teacher": len(parts[0]), "train_seconds": round(time.time() - t0)}
    (folder / "teachers.json").write_text(json.dumps(info))
    return info


def teacher_accuracies(folder: Path, evaluation: str, spec) -> tuple[float, float]:
    """(mean single-teacher accuracy, the ensemble's: mean logits) on the evaluation images."""
    from dpconvert.io.data import load_data
    from dpconvert.io.teacher_set import load_teachers
    from dpconvert.io.teachers import LoadOptions

    s = load_teachers(str(folder), LoadOptions(mean=spec.mean, std=spec.std))
    ds = load_data(evaluation, s.spec, require_labels=True)
    with torch.no_grad():
        logits = [torch.cat([m(x) for x in ds.x.split(1000)]) for m in s.members]
    single = sum(float((lg.argmax(1) == ds.y).float().mean()) for lg in logits) / len(logits)
    ensemble = float((torch.stack(logits).mean(0).argmax(1) == ds.y).float().mean())
    return single, ensemble


def convert(folder: Path, n: int, eps: float, batch: int, seed: int, public: str, evaluation: str, spec, extra: list) -> dict:
    with tempfile.TemporaryDirectory() as d:
        args = ["dpconvert", str(folder), "--mean", ",".join(map(str, spec.mean)), "--std", ",".join(map(str, spec.std)),
                "--disjoint-partitions", str(n), "--eps", f"{eps:g}", "--delta", "1e-5",
                "--public-data", public, "--batch-size", str(batch), "--eval-data", evaluation, "--seed", str(seed), "--seeded-noise",
                "--out", f"{d}/student.onnx", "--json", *extra]
        p = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"n={n} ε={eps} failed:\n{p.stderr[-3000:]}")
        card = json.loads(p.stdout)
        audit = subprocess.run(["dpconvert", "audit", "--allow-seeded-noise", f"{d}/student.onnx"], capture_output=True, text=True).returncode
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", p.stderr).group(1)
    seconds = sum(float(x) * 60**i for i, x in enumerate(reversed(wall.split(":"))))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024
    g, m = card["guarantee"], card["mechanism"]
    return {"command": shlex.join(args).replace(d, "OUT"), "partitions": n, "epsilon": g["epsilon"], "scope": g["scope"],
            "query_level_epsilon": g["query_level_epsilon"], "sigma": m["sigma"], "batch_size": m["batch_size"],
            "student_accuracy": card["utility"]["student_accuracy"], "audit_passed": audit == 0, "wall_seconds": round(seconds, 1),
            "peak_rss_mib": round(rss), "seed": seed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="10,50,250")
    ap.add_argument("--eps", default="1,8")
    ap.add_argument("--batch-size", type=int, default=10_000)
    ap.add_argument("--min-epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="benchmarks/runs", help="where the teachers are kept (one folder per n)")
    ap.add_argument("--private", default=f"{DATA}:train", help="the private records the partitions split")
    ap.add_argument("--input-size", default="1,28,28", help="the teachers' input C,H,W")
    ap.add_argument("--public", help="public query images (default: Fashion-MNIST test images 0–4 999)")
    ap.add_argument("--evaluation", help="labelled evaluation images (default: Fashion-MNIST test images 5 000–9 999)")
    ap.add_argument("--extra", default="", help="further dpconvert flags for every run")
    ap.add_argument("--json", help="append each result to this JSON list file")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    from dpconvert.io.spec import InputSpec
    from train_fmnist_teachers import SPEC

    runs = Path(args.runs)
    public, evaluation = (args.public, args.evaluation) if args.public and args.evaluation else prepare(runs)
    spec = InputSpec(*map(int, args.input_size.split(",")), 10, mean=SPEC.mean, std=SPEC.std)
    for n in map(int, args.partitions.split(",")):
        folder = runs / f"partitions_n{n}_{'x'.join(map(str, spec.shape))}"
        info = train_partition_teachers(n, folder, args.min_epochs, args.private, spec, args.seed)
        single, ensemble = teacher_accuracies(folder, evaluation, spec)
        for eps in map(float, args.eps.split(",")):
            row = convert(folder, n, eps, args.batch_size, args.seed, public, evaluation, spec, shlex.split(args.extra))
            report({**row, "records_per_teacher": info["records_per_teacher"], "teacher_accuracy_mean": round(single, 4),
                    "ensemble_accuracy": round(ensemble, 4)}, args.json)
    sys.exit(0)


if __name__ == "__main__":
    main()
