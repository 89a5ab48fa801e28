"""Quality of `dpconvert synth` on Fashion-MNIST without a teacher: train on the DP synthetic set, test on real images.

    python benchmarks/dpgan_quality.py --eps 1 2 4 --json benchmarks/results/fmnist_dpgan_quality.json

For each ε: the DP-critic GAN is trained on the 60 000 training images (record-level, δ = 1e-5, seeded noise so the
row reproduces), 10 000 class-balanced synthetic images are written with a sample grid
(``benchmarks/results/dpgan_fmnist_grid_eps{ε}_{critic}.png``), and a logistic regression on fixed scattering
features of the synthetic images (labels = the generator's classes) is tested on real test images 5 000–9 999.
The measure needs no teacher and no private labels beyond the GAN's own release. ``--ex-post`` also records the
card's ex-post expected privacy-loss estimate (empirical, not DP: ``mechanisms/ex_post.py``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _results import append_row  # benchmarks/_results.py (the script's folder is on sys.path)

DATA = "/usr/share/datasets/fashion-mnist"
EVAL = "benchmarks/runs/fmnist_eval_last5k.npz"
RESULTS = Path("benchmarks/results")


def scatter_features(x):
    import torch

    from dpconvert.students.scatternet import ScatterNet

    net = ScatterNet(1, J=2)
    with torch.no_grad():
        return torch.cat([net(x[i:i + 1000]).flatten(1) for i in range(0, len(x), 1000)]).numpy()


def synthetic_to_real(npz: Path, evaluation) -> float:
    import numpy as np
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    data = np.load(npz)
    train = scatter_features(torch.from_numpy(data["x"]).float() / 255)
    scale = StandardScaler().fit(train)
    clf = LogisticRegression(max_iter=300, C=0.01).fit(scale.transform(train), data["y"])
    return float(clf.score(scale.transform(scatter_features(evaluation.x.reshape(-1, *data['x'].shape[1:]))), evaluation.y.numpy()))


def main() -> None:
    from run_pknn import prepare

    from dpconvert.io.data import load_data
    from dpconvert.io.spec import InputSpec
    from dpconvert.methods.dpgan import GanOptions
    from dpconvert.synth import synthesize

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eps", nargs="+", type=float, default=[1.0, 2.0, 4.0])
    ap.add_argument("--critic", default="embedding")
    ap.add_argument("--config", default="{}", help="JSON dict of further GanOptions fields")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ex-post", action="store_true", help="also publish and record the ex-post estimate (synth --ex-post)")
    ap.add_argument("--json")
    args = ap.parse_args()
    prepare(Path("benchmarks/runs"))
    evaluation = load_data(EVAL, InputSpec(1, 28, 28, 10), require_labels=True)
    gan = GanOptions(critic=args.critic, **json.loads(args.config))
    for eps in args.eps:
        grid = RESULTS / f"dpgan_fmnist_grid_eps{eps:g}_{args.critic}.png"
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            card = synthesize(f"{DATA}:train", out=Path(d) / "synthetic.npz", input_size=(1, 28, 28), num_classes=10, eps=eps, samples=10000,
                              seed=args.seed, seeded_noise=True, grid=grid, gan=gan, ex_post=args.ex_post,
                              force=True)  # the grid of an earlier run of this row is replaced
            wall = time.perf_counter() - t0
            acc = synthetic_to_real(Path(d) / "synthetic.npz", evaluation)
        row = {"critic": args.critic, "target_epsilon": eps, "epsilon": card.data["guarantee"]["epsilon"], "scope": card.data["guarantee"]["scope"],
               "seed": args.seed, "synthetic_to_real_accuracy": acc, "classifier": "logistic regression on scattering features (J=2, L=8)",
               "evaluation_data": "fashion-mnist test images 5000..9999", "mechanism": card.data["mechanism"], "wall_seconds": round(wall, 1),
               "grid": str(grid), "empirical": card.data.get("empirical"),
               "command": f"python benchmarks/dpgan_quality.py --eps {eps:g} --critic {args.critic}"
               + (f" --config '{args.config}'" if args.config != "{}" else "") + (" --ex-post" if args.ex_post else "")}
        print(f"ε={eps:g} ({args.critic}): synthetic→real {acc:.4f}, ε on the card {row['epsilon']:.4f}, {wall:.0f} s", flush=True)
        append_row(row, args.json)


if __name__ == "__main__":
    main()
