"""A real published natural-image classifier as a teacher: the CIFAR-10 CNN bundled in the PyPI package
``cifar-10-model`` 7.4.0 (Keras ``cnn_model.h5``, licence BSD-3 per its metadata), ported to a TorchScript file that
``dpconvert`` loads as a user's model. Nobody here trained or tuned it.

Set-up (once; the weights stay out of the repository, the wheels are read as zip files, nothing is installed):

    pip download --no-deps cifar-10-model==7.4.0 foolbox==3.3.4 -d benchmarks/runs/wheels
    pip install h5py
    python benchmarks/published_cifar10_teacher.py

Writes ``benchmarks/runs/cifar10_published.pt`` (TorchScript; input 3×32×32 raw 0–255 pixels, so
``--mean 0,0,0 --std 0.0039215686,0.0039215686,0.0039215686``) and ``benchmarks/runs/natural_eval.npz``: the 60
natural images that foolbox ships (20 CIFAR-10 and 20 CIFAR-100 test images at 32 px, 20 ImageNet images resized to
32 px), none of them used by any prior, labelled with the teacher's own answers, so a student's "accuracy" on it is
its agreement with the teacher. Also prints the teacher's accuracy on the 20 CIFAR-10 images (true labels in the
file names), which checks the port.
"""

from __future__ import annotations

import argparse
import io
import re
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

RUNS = Path(__file__).parent / "runs"
STD = 1 / 255  # the Keras model takes raw 0–255 pixels: no rescaling layer, and its data loader does not divide


class KerasCifarCnn(nn.Module):
    """``cifar_10_model.model.cnn_model``: three pairs of valid 3×3 conv + ReLU + BatchNorm (ε 1e-3), max pools, then
    dense 1024 → 512 → 10 with ReLU on every dense layer (the last one too, as published)."""

    def __init__(self) -> None:
        super().__init__()
        widths = [(3, 64), (64, 64), (64, 128), (128, 128), (128, 64), (64, 64)]
        self.convs = nn.ModuleList(nn.Conv2d(i, o, 3) for i, o in widths)
        self.norms = nn.ModuleList(nn.BatchNorm2d(o, eps=1e-3) for _, o in widths)
        self.dense = nn.ModuleList([nn.Linear(64, 1024), nn.Linear(1024, 512), nn.Linear(512, 10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(torch.relu(conv(x)))
            if i in (1, 3):
                x = torch.nn.functional.max_pool2d(x, 2, 2)
        x = x.flatten(1)  # 64×1×1: Keras' NHWC flatten is the same order
        for layer in self.dense:
            x = torch.relu(layer(x))
        return x


def _wheel(prefix: str, wheels: Path) -> zipfile.ZipFile:
    found = sorted(wheels.glob(f"{prefix}-*.whl"))
    if not found:
        raise SystemExit(f"no {prefix} wheel in {wheels}: run the pip download line of this script's docstring")
    return zipfile.ZipFile(found[-1])


def load_keras_weights(model: KerasCifarCnn, wheels: Path) -> None:
    import h5py

    data = _wheel("cifar_10_model", wheels).read("cifar_10_model/trained_models/cnn_model.h5")
    with h5py.File(io.BytesIO(data), "r") as f:
        w = f["model_weights"]

        def get(layer: str, name: str) -> torch.Tensor:
            return torch.from_numpy(np.asarray(w[layer][layer][f"{name}:0"]))

        for i, (conv, norm) in enumerate(zip(model.convs, model.norms)):
            c, b = f"conv2d{'_' + str(i) if i else ''}", f"batch_normalization{'_' + str(i) if i else ''}"
            conv.weight.data = get(c, "kernel").permute(3, 2, 0, 1).contiguous()  # (kh, kw, in, out) → (out, in, kh, kw)
            conv.bias.data = get(c, "bias")
            norm.weight.data, norm.bias.data = get(b, "gamma"), get(b, "beta")
            norm.running_mean.data, norm.running_var.data = get(b, "moving_mean"), get(b, "moving_variance")
        for i, layer in enumerate(model.dense):
            d = f"dense{'_' + str(i) if i else ''}"
            layer.weight.data, layer.bias.data = get(d, "kernel").t().contiguous(), get(d, "bias")


def foolbox_images(wheels: Path) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(uint8 N×3×32×32, names, CIFAR-10 labels or −1) for foolbox's bundled CIFAR-10, CIFAR-100 and ImageNet samples."""
    from PIL import Image

    z = _wheel("foolbox", wheels)
    images, names, labels = [], [], []
    for name in sorted(z.namelist()):
        m = re.match(r"foolbox/data/(cifar10|cifar100|imagenet)_(\d+)_(\d+)\.(png|jpg)$", name)
        if not m:
            continue
        img = Image.open(io.BytesIO(z.read(name))).convert("RGB")
        if img.size != (32, 32):
            img = img.resize((32, 32), Image.BICUBIC)
        images.append(np.asarray(img).transpose(2, 0, 1))
        names.append(Path(name).name)
        labels.append(int(m.group(3)) if m.group(1) == "cifar10" else -1)
    return np.stack(images), names, np.array(labels)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=RUNS / "wheels")
    ap.add_argument("--out", type=Path, default=RUNS / "cifar10_published.pt")
    ap.add_argument("--eval-out", type=Path, default=RUNS / "natural_eval.npz")
    args = ap.parse_args()
    model = KerasCifarCnn().eval()
    load_keras_weights(model, args.wheels)
    x, names, labels = foolbox_images(args.wheels)
    with torch.no_grad():
        answers = model(torch.from_numpy(x).float()).argmax(1).numpy()  # raw 0–255 pixels, as published
    known = labels >= 0
    print(f"teacher accuracy on foolbox's {known.sum()} CIFAR-10 test images: {(answers[known] == labels[known]).mean():.0%}")
    print("teacher's classes on all", len(x), "images:", np.bincount(answers, minlength=10).tolist())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(model), str(args.out))
    np.savez(args.eval_out, x=x, y=answers.astype(np.int64))
    print(f"wrote {args.out} and {args.eval_out} (labels = the teacher's answers: accuracy there is agreement)")


if __name__ == "__main__":
    main()
