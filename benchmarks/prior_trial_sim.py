"""How often the prior trial (convert/methods/prior_trial.py) picks the family that trains the better student.

For each teacher, the clean per-image targets of a two-family mixture that ``data_free_sim.py`` cached (images
f·n/2 … of family f, averaged over its clean views) stand in for the trial's images: each draw takes ``--images`` of
each family, adds the noise of the mean of ``--views`` released rows (σ at ε, δ; γ), and scores each family by the
product's ``effective_classes``. Prints the share of draws that chose each family.

    python benchmarks/data_free_sim.py --teacher benchmarks/runs/fmnist_resnet34_64.safetensors --eval-data \
        benchmarks/runs/fmnist_eval_last5k.npz --prior framed_fields+natural_crops --images 1000 --rows 1.5e5 --denoise none
    python benchmarks/prior_trial_sim.py /tmp/data_free_sim/fmnist_resnet34_64_framed_fields+natural_crops_1000_16_0.pt
"""

from __future__ import annotations

import argparse
import math

import torch


def main() -> None:
    from dpconvert.accounting.calibrate import dpdfd_sigma
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.methods.prior_trial import TRIAL_FAMILIES, TRIAL_IMAGES, TRIAL_VIEWS, effective_classes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cached", nargs="+", help="clean targets of a two-family mixture cached by data_free_sim.py")
    p.add_argument("--images", type=int, default=TRIAL_IMAGES)
    p.add_argument("--views", type=int, default=TRIAL_VIEWS)
    p.add_argument("--eps", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--draws", type=int, default=200)
    a = p.parse_args()
    noise = DpdfdConfig.target_step * dpdfd_sigma(eps=a.eps, delta=a.delta, steps=1) / math.sqrt(a.views)
    g = torch.Generator().manual_seed(0)
    for path in a.cached:
        clean = torch.load(path)
        half = len(clean) // 2
        families = (clean[:half], clean[half:])
        chosen = [0, 0]
        for _ in range(a.draws):
            scores = []
            for fam in families:
                pick = fam[torch.randperm(len(fam), generator=g)[: a.images]]
                scores.append(effective_classes(pick + noise * torch.randn(pick.shape, generator=g)))
            chosen[max(range(2), key=lambda k: (scores[k], -k))] += 1
        clean_scores = ", ".join(f"{n} {effective_classes(f):.2f}" for n, f in zip(TRIAL_FAMILIES, families))
        shares = ", ".join(f"{n} {c / a.draws:.0%}" for n, c in zip(TRIAL_FAMILIES, chosen))
        print(f"{path}: {a.images} images × {a.views} views per family: chosen {shares} (clean: {clean_scores})")


if __name__ == "__main__":
    main()
