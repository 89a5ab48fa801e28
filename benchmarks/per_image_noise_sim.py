"""Design measurement: how noisy are per-image targets out of domain, and what does the denoiser recover?

Per-image targets (``--public-targets per-image``) average the m released rows about each public image. Here the
clean targets come from cached teacher answers to views of the 5 000 MNIST digits (``label_release_sim.py --views``:
the views without mixup), the noise of a query-level ε = 1 release (σ = 3.73 per row, target step γ = 5) is
simulated for m rows per image (σ calibrated by the product for one release at ``--eps``), and the product's empirical-Bayes denoiser (``source_targets.empirical_bayes``) is
scored against the clean targets: squared error, top-class agreement, and KL(clean ‖ denoised) of their softmaxes.

    python benchmarks/per_image_noise_sim.py --cache CACHE [--json benchmarks/results/fmnist_ood_per_image_noise.json]
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F


def main() -> None:
    from dpconvert.accounting.calibrate import dpdfd_sigma
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.distill.source_targets import SourceTargets, empirical_bayes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", required=True)
    p.add_argument("--rows", default="200,400,2000", help="m: rows per image")
    p.add_argument("--components", default="10,30,100", help="mixture components of the denoiser's prior")
    p.add_argument("--eps", type=float, default=1.0, help="query-level ε of the release (δ = 1e-5, one release)")
    p.add_argument("--json")
    a = p.parse_args()
    sigma, step = dpdfd_sigma(eps=a.eps, delta=1e-5, steps=1), DpdfdConfig.target_step  # σ per row; γ
    d = torch.load(a.cache)
    keep = d["src"] >= 0
    logits, src = d["logits"][keep], d["src"][keep]
    rows = logits - logits.mean(1, keepdim=True)
    rows = rows / rows.norm(dim=1, keepdim=True)  # the normalised release row (logit matching, student head at zero)
    targets = SourceTargets(int(src.max()) + 1, rows.shape[1])
    targets.add(src, rows)
    clean = step * targets.means()
    n = len(clean)
    torch.manual_seed(0)
    out = []
    for m in map(int, a.rows.split(",")):
        var = (step * sigma) ** 2 / m
        noisy = clean + math.sqrt(var) * torch.randn_like(clean)
        variants = [("none", noisy)] + [(f"bayes, {c} components", empirical_bayes(noisy, torch.full((n,), var, dtype=torch.float64), 0, components=c))
                                        for c in map(int, a.components.split(","))]
        for name, y in variants:
            row = {"rows_per_image": m, "denoiser": name, "squared_error": round(((y - clean) ** 2).sum(1).mean().item(), 3),
                   "top_class_agreement": round((y.argmax(1) == clean.argmax(1)).float().mean().item(), 3),
                   "kl_clean_to_target": round(F.kl_div(F.log_softmax(y, 1), F.log_softmax(clean, 1), log_target=True,
                                                        reduction="batchmean").item(), 3)}
            print(json.dumps(row), flush=True)
            out.append(row)
    print(json.dumps({"clean_squared_norm": round((clean ** 2).sum(1).mean().item(), 2)}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
