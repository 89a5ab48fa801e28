"""Reproduce the built-in ``builtin:digits`` teacher.

    python -m dpconvert.builtin.train_digits_teacher [--out PATH] [--seed 0]

A ``wide_cnn`` trained (non-privately: it is the *sensitive* teacher) on the
train split of scikit-learn's 8x8 digits (``builtin:digits:train``), evaluated
on the fixed test split. Saved as safetensors with the architecture and input
spec in the metadata so ``dpconvert inspect builtin:digits`` needs no flags.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from dpconvert.io.data import digits_split, fit_to_spec
from dpconvert.io.spec import InputSpec
from dpconvert.students import create_student

ARCH = "wide_cnn"
# Pixel statistics of the digits train split (pixels / 16).
SPEC = InputSpec(channels=1, height=8, width=8, num_classes=10, mean=(0.305,), std=(0.376,))


def train(seed: int = 0, epochs: int = 60) -> tuple[torch.nn.Module, float]:
    torch.manual_seed(seed)
    train = fit_to_spec(digits_split("train"), SPEC)
    test = fit_to_spec(digits_split("test"), SPEC)
    model = create_student(ARCH, SPEC)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(train), generator=g).split(64):
            x = train.x[idx]
            x = x + 0.05 * torch.randn(x.shape, generator=g)  # light augmentation
            loss = F.cross_entropy(model(x), train.y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    model.eval()
    with torch.no_grad():
        acc = (model(test.x).argmax(1) == test.y).float().mean().item()
    return model, acc


def main() -> None:
    from safetensors.torch import save_file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).with_name("digits_teacher.safetensors")))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model, acc = train(args.seed)
    meta = {"dpconvert.arch": ARCH, "dpconvert.input_spec": json.dumps(SPEC.to_dict()), "dpconvert.test_accuracy": f"{acc:.4f}"}
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.out, metadata=meta)
    print(f"wrote {args.out}: {ARCH}, test accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
