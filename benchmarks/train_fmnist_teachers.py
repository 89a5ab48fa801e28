"""Train the Fashion-MNIST benchmark teachers (the *sensitive* models to convert).

    apt-get install -y dataset-fashion-mnist
    python benchmarks/train_fmnist_teachers.py [--data /usr/share/datasets/fashion-mnist] [--out benchmarks/runs]

Writes ``fmnist_cnn.safetensors`` (wide_cnn, input spec in the metadata) and
``fmnist_resnet18.safetensors`` (timm resnet18, in_chans=1) and prints their
test accuracy; ``--which cnn2`` writes ``fmnist_cnn2.safetensors`` (datalens_cnn, seed 1: the held-out teacher
that no data-free default is chosen on). Non-private training: these are the teachers DPDFD protects.

``--which resnet34`` trains a timm ``resnet34`` (BatchNorm, ImageNet-style stem, 3 channels) on Fashion-MNIST
upsampled to RGB at 3×64×64 with ImageNet's mean/std (``fmnist_resnet34_64.safetensors``); ``--which resnet34_224``
fine-tunes that model at 3×224×224 on ``--finetune-images`` training images resized on the fly and writes it as
a bare state dict, ``resnet34.pt``: the headline command's teacher (``dpconvert resnet34.pt --eps 1 --out
student.onnx`` must recognise it from its keys, read 10 classes from its head and 224 px from timm's config).
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
IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))  # what timm's pretrained_cfg says for resnet34
SPEC_R34 = InputSpec(3, 64, 64, 10, **IMAGENET)
SPEC_R34_224 = InputSpec(3, 224, 224, 10, **IMAGENET)


def train(arch: str, train, test, epochs: int, lr: float, seed: int = 0, spec=SPEC, model=None, resize=None, images=None):
    """``resize``: train and test at this size, resizing each minibatch on the fly (the data set stays small);
    ``images``: train on this many images per epoch."""
    torch.manual_seed(seed)
    model = model if model is not None else create_student(arch, spec)
    model = model.to(memory_format=torch.channels_last)
    sized = (lambda x: x) if resize is None else (lambda x: F.interpolate(x, size=(resize, resize), mode="bilinear", align_corners=False))
    n_train = len(train) if images is None else min(images, len(train))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=5e-4)
    steps = epochs * (n_train // 128)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    g = torch.Generator().manual_seed(seed)
    for ep in range(epochs):
        model.train()
        t0 = time.time()
        for idx in torch.randperm(len(train), generator=g)[:n_train].split(128)[: n_train // 128]:
            x = sized(train.x[idx]).contiguous(memory_format=torch.channels_last)
            flip = torch.rand(len(idx), generator=g) < 0.5  # horizontal flips: clothes are symmetric
            x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            loss = F.cross_entropy(model(x), train.y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        acc = accuracy(model, test, sized)
        print(f"{arch} epoch {ep + 1}/{epochs}: test accuracy {acc:.4f} ({time.time() - t0:.0f} s)", flush=True)
    return model, acc


@torch.no_grad()
def accuracy(model, ds, sized=lambda x: x) -> float:
    model.eval()
    pred = torch.cat([model(sized(x)).argmax(1) for x in ds.x.split(200)])
    return float((pred == ds.y).float().mean())


def main() -> None:
    from safetensors.torch import save_file

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default="benchmarks/runs")
    ap.add_argument("--which", default="cnn,resnet18")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--finetune-images", type=int, default=8192, help="resnet34_224: training images of the 224-px fine-tune")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for which in args.which.split(","):
        if which.startswith("resnet34"):
            train_resnet34(which, args, out)
            continue
        train_ds = load_data(f"{args.data}:train", SPEC, require_labels=True)
        test_ds = load_data(f"{args.data}:test", SPEC, require_labels=True)
        # cnn2: a second teacher of another architecture and seed that no data-free default was tuned on
        arch, lr, seed = {"cnn": ("wide_cnn", 3e-3, 0), "cnn2": ("datalens_cnn", 3e-3, 1), "resnet18": ("timm:resnet18", 2e-3, 0)}[which]
        model, acc = train(arch, train_ds, test_ds, args.epochs, lr, seed=seed)
        meta = {"dpconvert.arch": arch, "dpconvert.input_spec": json.dumps(SPEC.to_dict()), "dpconvert.test_accuracy": f"{acc:.4f}"}
        path = out / f"fmnist_{which}.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=meta)
        print(f"wrote {path}: {arch}, test accuracy {acc:.4f}")


def train_resnet34(which: str, args, out: Path) -> None:
    """A deep ImageNet-style teacher with a measurable task: timm resnet34 on Fashion-MNIST as RGB."""
    import timm
    from safetensors.torch import load_file, save_file

    train_ds = load_data(f"{args.data}:train", SPEC_R34, require_labels=True)  # grey → 3 channels, 28 → 64 px, per image
    test_ds = load_data(f"{args.data}:test", SPEC_R34, require_labels=True)
    if which == "resnet34":
        model, acc = train("timm:resnet34", train_ds, test_ds, args.epochs, 2e-3, spec=SPEC_R34)
        meta = {"dpconvert.arch": "timm:resnet34", "dpconvert.input_spec": json.dumps(SPEC_R34.to_dict()), "dpconvert.test_accuracy": f"{acc:.4f}"}
        path = out / "fmnist_resnet34_64.safetensors"
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=meta)
    else:  # fine-tune the 64-px model at 224 px (a ResNet's weights carry over across resolutions; BatchNorm re-adapts)
        model = timm.create_model("resnet34", num_classes=10, pretrained=False)
        model.load_state_dict(load_file(str(out / "fmnist_resnet34_64.safetensors")))
        model, acc = train("timm:resnet34", train_ds, test_ds, args.epochs, 5e-4, spec=SPEC_R34_224, model=model, resize=224,
                           images=args.finetune_images)
        path = out / "resnet34.pt"
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))  # a bare state dict, as users have them
    print(f"wrote {path}: timm resnet34, test accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
