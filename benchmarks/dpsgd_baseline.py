"""DP-SGD baseline (Opacus) for the Private-kNN benchmark: same student, same data, same (ε, δ).

    pip install -e ".[bench]"
    python benchmarks/dpsgd_baseline.py --student datalens_cnn --eps 1 --json benchmarks/results/fmnist_pknn.json

Trains the student architecture directly on the 60k private Fashion-MNIST
training images with DP-SGD (record-level, add/remove, Poisson sampling,
Opacus RDP accountant; ``make_private_with_epsilon`` calibrates σ). Opacus
cannot do per-sample gradients through BatchNorm, so ``ModuleValidator.fix``
swaps BatchNorm for GroupNorm, and in-place ReLUs are made out-of-place — the
only changes to the architecture.
Defaults follow common DP-SGD practice (large batches, a few epochs, clip 1,
SGD with momentum); evaluated on the same last 5k test images.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from _results import report  # benchmarks/_results.py (the script's folder is on sys.path)

import torch
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--student", default="datalens_cnn")
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()

    from opacus import PrivacyEngine
    from opacus.validators import ModuleValidator

    from dpconvert.io.data import load_data
    from dpconvert.io.spec import InputSpec
    from dpconvert.students import create_student

    torch.manual_seed(args.seed)
    spec = InputSpec(1, 28, 28, 10, mean=(0.286,), std=(0.353,))
    train = load_data(f"{DATA}:train", spec, require_labels=True)
    test = load_data(DATA, spec, require_labels=True)
    x_eval, y_eval = test.x[5000:], test.y[5000:]
    model = ModuleValidator.fix(create_student(args.student, spec))
    for m in model.modules():  # Opacus' backward hooks forbid in-place activations
        if hasattr(m, "inplace"):
            m.inplace = False
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train.x, train.y), batch_size=args.batch_size, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    engine = PrivacyEngine(accountant="rdp", secure_mode=False)
    model, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=opt, data_loader=loader, target_epsilon=args.eps, target_delta=args.delta,
        epochs=args.epochs, max_grad_norm=args.clip, poisson_sampling=True)
    t0 = time.perf_counter()
    for ep in range(args.epochs):
        model.train()
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = float((torch.cat([model(c).argmax(1) for c in x_eval.split(1000)]) == y_eval).float().mean())
        print(f"epoch {ep + 1}: eval accuracy {acc:.4f}, ε so far {engine.get_epsilon(args.delta):.3f}", flush=True)
    r = {
        "method": "dp-sgd (opacus)", "student": f"{args.student} (BatchNorm→GroupNorm)", "epsilon": engine.get_epsilon(args.delta),
        "delta": args.delta, "scope": "record", "noise_multiplier": opt.noise_multiplier, "epochs": args.epochs,
        "batch_size": args.batch_size, "lr": args.lr, "clip": args.clip, "student_accuracy": acc,
        "evaluation_data": "fashion-mnist test images 5000..9999", "wall_seconds": round(time.perf_counter() - t0, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "command": "python benchmarks/dpsgd_baseline.py " + " ".join(sys.argv[1:]),
    }
    report(r, args.json)


if __name__ == "__main__":
    main()
