"""Train the Fashion-MNIST benchmark teachers (the *sensitive* models to convert).

    apt-get install -y dataset-fashion-mnist
    python benchmarks/train_fmnist_teachers.py [--data /usr/share/datasets/fashion-mnist] [--out benchmarks/runs]

Writes ``fmnist_cnn.safetensors`` (wide_cnn, input spec in the metadata) and
``fmnist_resnet18.safetensors`` (timm resnet18, in_chans=1) and prints their
test accuracy. Non-private training: these are the teachers DPDFD protects.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from dpconvert.io.data import load_data
from dpconvert.io.spec import InputSpec
from dpconvert.students import create_student

SPEC = InputSpec(1, 28, 28, 10, mean=(0.286,), std=(0.353,))


def train(arch: str, train, test, epochs: int, lr: float, seed: int = 0) -> tuple[torch.nn.Module, float]:
    torch.manual_seed(seed)
    model = create_student(arch, SPEC)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=5e-4)
    steps = epochs * (len(train) // 128)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    g = torch.Generator().manual_seed(seed)
    for ep in range(epochs):
        model.train()
        t0 = time.time()
        for idx in torch.randperm(len(train), generator=g).split(128)[: len(train) // 128]:
            x = train.x[idx]
            flip = torch.rand(len(idx), generator=g) < 0.5  # horizontal flips: clothes are symmetric
            x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            loss = F.cross_entropy(model(x), train.y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        acc = accuracy(model, test)
        print(f"{arch} epoch {ep + 1}/{epochs}: test accuracy {acc:.4f} ({time.time() - t0:.0f} s)", flush=True)
    return model, acc


@torch.no_grad()
def accuracy(model, ds) -> float:
    model.eval()
    pred = torch.cat([model(x).argmax(1) for x in ds.x.split(1000)])
    return float((pred == ds.y).float().mean())


def main() -> None:
    from safetensors.torch import save_file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default="benchmarks/runs")
    ap.add_argument("--which", default="cnn,resnet18")
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_ds = load_data(f"{args.data}:train", SPEC, require_labels=True)
    test_ds = load_data(f"{args.data}:test", SPEC, require_labels=True)
    for which in args.which.split(","):
        arch, lr = {"cnn": ("wide_cnn", 3e-3), "resnet18": ("timm:resnet18", 2e-3)}[which]
        model, acc = train(arch, train_ds, test_ds, args.epochs, lr)
        meta = {"dpconvert.arch": arch, "dpconvert.input_spec": json.dumps(SPEC.to_dict()), "dpconvert.test_accuracy": f"{acc:.4f}"}
        path = out / f"fmnist_{which}.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=meta)
        print(f"wrote {path}: {arch}, test accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
