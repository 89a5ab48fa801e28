"""The empirical side of the record-level methods: membership inference against a deliberately leaky teacher and
each method's ε = 1 student, on the same members.

    python benchmarks/mia_leaky.py --json benchmarks/results/mia_fmnist_leaky.json --plot benchmarks/results/mia_fmnist_leaky.png

Members: Fashion-MNIST training images 0–1 999 (the teacher's whole training set and every method's private data);
non-members: training images 30 000–31 999. The teacher (wide_cnn, no augmentation, no regularisation) is trained
to ~100 % training accuracy so that it leaks. Each method converts it at record-level ε = 1 with the members as
private data (Private-kNN: 1 000 of the unlabelled test images 0–4 999 as queries, k and γ scaled to 2 000 records). The audit
is the product's: loss and LiRA attacks with 8 reference models (``dpconvert audit --members/--non-members
--reference-models 8``); TPR at 0.1 % FPR with bootstrap 95 % intervals. Seeded noise, so the rows reproduce.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _results import append_row
from run_pknn import prepare

from dpconvert import convert
from dpconvert.io.data import load_data
from dpconvert.io.spec import InputSpec
from dpconvert.students import create_student

DATA = "/usr/share/datasets/fashion-mnist"
SPEC = InputSpec(1, 28, 28, 10, mean=(0.286,), std=(0.353,))
RUNS = Path("benchmarks/runs")
# Private-kNN on 2 000 records: k and γ scaled down, and 1 000 queries (5 000 would spend more than ε = 1 on screening)
METHODS = {"dpsgd": {}, "adlm": {}, "pknn": {"k": 50, "sampling_rate": 0.3, "queries": 1000}}


def leaky_teacher(members, epochs: int) -> Path:
    """wide_cnn trained on the members alone, without augmentation or regularisation."""
    from safetensors.torch import save_file

    path = RUNS / "fmnist_leaky_cnn.safetensors"
    if path.exists():
        return path
    torch.manual_seed(0)
    model = create_student("wide_cnn", SPEC)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(members.x), generator=g).split(64):
            loss = F.cross_entropy(model(members.x[idx]), members.y[idx].long())
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(members.x).argmax(1) == members.y).float().mean())
    print(f"leaky teacher: training accuracy {acc:.4f}", flush=True)
    meta = {"dpconvert.arch": "wide_cnn", "dpconvert.input_spec": json.dumps(SPEC.to_dict()), "dpconvert.train_accuracy": f"{acc:.4f}"}
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=meta)
    return path


def split_files() -> tuple[str, str]:
    """members / non-members as uint8 .npz (the product reads them per record)."""
    train = load_data(f"{DATA}:train", InputSpec(1, 28, 28, 10), require_labels=True)
    out = []
    for name, sl in (("leaky_members", slice(0, 2000)), ("leaky_non_members", slice(30000, 32000))):
        path = RUNS / f"{name}.npz"
        if not path.exists():
            np.savez_compressed(path, x=(train.x[sl].numpy() * 255).round().astype(np.uint8), y=train.y[sl].numpy())
        out.append(str(path))
    return out[0], out[1]


def main() -> None:
    from dpconvert.auditing.membership import membership_audit, plot_roc

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--reference-models", type=int, default=8)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    RUNS.mkdir(parents=True, exist_ok=True)
    members, non_members = split_files()
    teacher = leaky_teacher(load_data(members, SPEC, require_labels=True), args.epochs)
    public, evaluation = prepare(RUNS)
    curves, command = {}, "python benchmarks/mia_leaky.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory() as d:
        for method in args.methods:
            options = METHODS[method]
            extra = {"public_data": public} if method == "pknn" else {}
            res = convert(str(teacher), out=Path(d) / f"{method}.onnx", method=method, eps=1.0, private_data=members, eval_data=evaluation,
                          seed=0, seeded_noise=True, **extra, **options)
            results = membership_audit(str(res.out), members, non_members, teacher=str(teacher), reference_models=args.reference_models)
            for target, attacks in results.items():
                name = "teacher (non-private)" if target == "teacher" else f"{method} student"
                if target == "teacher" and "teacher (non-private)" in curves:
                    continue
                curves[name] = attacks
                u = res.card.data["utility"]
                row = {"target": name, "epsilon": None if target == "teacher" else res.card.data["guarantee"]["epsilon"],
                       "accuracy": u["teacher_accuracy"] if target == "teacher" else u["student_accuracy"],
                       "evaluation_data": "fashion-mnist test images 5000..9999", "members": 2000, "non_members": 2000,
                       "attacks": [a.to_dict() for a in attacks], "command": command}
                best = max(attacks, key=lambda a: a.metrics["tpr_at_0.1%_fpr"])
                print(f"{name}: accuracy {row['accuracy']:.4f}; best TPR@0.1%FPR {best.metrics['tpr_at_0.1%_fpr']:.4f} "
                      f"[{best.ci95['tpr_at_0.1%_fpr'][0]:.4f}, {best.ci95['tpr_at_0.1%_fpr'][1]:.4f}] ({best.attack}); "
                      f"AUC {best.metrics['auc']:.3f}", flush=True)
                append_row(row, args.json)
    if args.plot:
        plot_roc(curves, args.plot)


if __name__ == "__main__":
    main()
