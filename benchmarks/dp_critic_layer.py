"""The paper's own "DP critic layer" on Fashion-MNIST, measured beside the critics dpconvert ships — benchmark only.

    python benchmarks/dp_critic_layer.py --json benchmarks/results/fmnist_dp_critic_layer.json
    python benchmarks/dp_critic_layer.py --sigma 0 --clip 0 --json …   # the same GAN with no DP layer (reference)

"Generating Artificial Data for Private Deep Learning" (Triastcyn & Faltings, §4.1) clips the critic's penultimate
activations of every example to ℓ2 norm C and adds N(0, σ²C²) to them in every forward pass (C = 1, σ = 1.5 in the
paper). The layers below it are trained on the private records by ordinary gradients, so nothing bounds one record's
effect on the critic's weights or on the generator trained against them, and the noise is fresh on every pass with no
accountant for how many passes saw a record: there is no ε to report (docs/methods.md, "Not shipped"). This script
measures what the layer gives, so that leaving it out is a measured choice: the same generator (``dcgan_small``), the
same critic body as the shipped DP-SGD critic (``DpCritic``), lots of q·n real records (q = 0.02, 1 000 steps) and
512 generated ones per step, Adam 2e-4; then 10 000 class-balanced samples, scored as ``dpgan_quality.py`` scores the
shipped critics (a logistic regression on scattering features, tested on real test images 5 000–9 999), and the
paper's ex-post expected privacy-loss estimate on them (``mechanisms/ex_post.py``; empirical, not DP).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _results import append_row  # benchmarks/_results.py (the script's folder is on sys.path)
from dpgan_quality import DATA, EVAL, synthetic_to_real

from dpconvert.mechanisms.dp_gan import DpCritic


class DpLayerCritic(DpCritic):
    """``DpCritic`` with the paper's DP layer on the penultimate activations h: clip each example's h to norm C, add
    N(0, σ²C²) (C = 0: no layer, an ordinary critic)."""

    def __init__(self, spec, clip: float, sigma: float, rng: torch.Generator) -> None:
        super().__init__(spec)
        self.clip, self.sigma, self.rng = clip, sigma, rng

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if self.clip > 0:
            h = h * (self.clip / h.norm(dim=1, keepdim=True).clamp_min(self.clip))  # ‖h‖ ≤ C per example
            h = h + self.sigma * self.clip * torch.randn(h.shape, generator=self.rng)
        return self.head(h, y)


def train(x, y, spec, *, clip, sigma, steps, sampling_rate, fake_batch, lr, seed):
    from dpconvert.generators import create_generator
    from dpconvert.methods.dpgan import DPGAN_GENERATOR

    torch.manual_seed(seed)
    rng = torch.Generator().manual_seed(seed + 1)
    generator = create_generator(DPGAN_GENERATOR, spec, nz=64)
    critic = DpLayerCritic(spec, clip, sigma, rng)
    opt_d = torch.optim.Adam(critic.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(generator.parameters(), lr=lr, betas=(0.5, 0.999))

    def fake(n):
        z, c = torch.randn(n, generator.nz, generator=rng), torch.randint(0, spec.num_classes, (n,), generator=rng)
        return generator(z, c), c

    for step in range(1, steps + 1):
        idx = torch.nonzero(torch.rand(len(x), generator=rng) < sampling_rate).squeeze(1)
        generator.eval()
        with torch.no_grad():
            xf, yf = fake(fake_batch)
        logits = critic(torch.cat([x[idx], xf]), torch.cat([y[idx], yf]))
        loss_d = F.binary_cross_entropy_with_logits(logits, torch.cat([torch.ones(len(idx)), torch.zeros(fake_batch)]))
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        generator.train()
        critic.requires_grad_(False)
        xf, yf = fake(fake_batch)
        loss_g = F.binary_cross_entropy_with_logits(critic(xf, yf), torch.ones(fake_batch))
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
        critic.requires_grad_(True)
        if step % 100 == 0:
            print(f"step {step}/{steps}: critic {loss_d.item():.3f}, generator {loss_g.item():.3f}", flush=True)
    return generator.eval()


def main() -> None:
    from dpconvert.generators.saved import sample_labelled
    from dpconvert.io.data import load_data
    from dpconvert.io.spec import InputSpec
    from dpconvert.mechanisms.ex_post import estimate
    from run_pknn import prepare

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clip", type=float, default=1.0, help="C of the DP layer (0: no layer)")
    ap.add_argument("--sigma", type=float, default=1.5, help="σ of the DP layer (the paper's 1.5)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--sampling-rate", type=float, default=0.02)
    ap.add_argument("--fake-batch", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--private", default=f"{DATA}:train", help="the GAN's training records (labelled)")
    ap.add_argument("--evaluation", default=EVAL, help="real labelled images the synthetic-trained classifier is tested on")
    ap.add_argument("--input-size", default="1,28,28", help="C,H,W")
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.evaluation == EVAL:
        prepare(Path("benchmarks/runs"))
    shape = tuple(int(v) for v in args.input_size.split(","))
    spec = InputSpec(*shape, args.num_classes, mean=(0.0,) * shape[0], std=(1.0,) * shape[0])  # generator output = pixels in [0, 1]
    private = load_data(args.private, spec, require_labels=True)
    evaluation = load_data(args.evaluation, InputSpec(*shape, args.num_classes), require_labels=True)
    t0 = time.perf_counter()
    generator = train(private.x, private.y.long(), spec, clip=args.clip, sigma=args.sigma, steps=args.steps, sampling_rate=args.sampling_rate,
                      fake_batch=args.fake_batch, lr=args.lr, seed=args.seed)
    with torch.no_grad():
        x, labels = sample_labelled(generator, args.samples, args.num_classes, torch.Generator().manual_seed(args.seed))
    train_s = time.perf_counter() - t0
    pixels = (x.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    with tempfile.TemporaryDirectory() as d:
        np.savez_compressed(Path(d) / "synthetic.npz", x=pixels, y=labels.numpy())
        acc = synthetic_to_real(Path(d) / "synthetic.npz", evaluation)
    ex_post = estimate(private.x.flatten(1).numpy().astype(np.float64), pixels.reshape(len(pixels), -1).astype(np.float64) / 255.0,
                       seed=args.seed)
    layer = f"DP critic layer C = {args.clip:g}, σ = {args.sigma:g}" if args.clip > 0 else "no DP layer (ordinary critic)"
    row = {"critic": layer, "epsilon": None, "why_no_epsilon": "the layers below the DP layer train on the records by unclipped gradients; "
           "no accountant bounds the generator's release", "seed": args.seed, "synthetic_to_real_accuracy": acc,
           "classifier": "logistic regression on scattering features (J=2, L=8)", "private_data": args.private, "evaluation_data": args.evaluation,
           "empirical_ex_post": ex_post, "steps": args.steps, "sampling_rate": args.sampling_rate, "fake_batch": args.fake_batch,
           "wall_seconds_train": round(train_s, 1),
           "command": f"python benchmarks/dp_critic_layer.py --clip {args.clip:g} --sigma {args.sigma:g} --seed {args.seed}"
           + (f" --private {args.private} --evaluation {args.evaluation} --input-size {args.input_size}" if args.evaluation != EVAL else "")}
    print(f"{layer}: synthetic→real {acc:.4f}, ex-post μ {ex_post['expected_privacy_loss_bound']:.3g}, mean {ex_post['mean_privacy_loss']:.3g}, train {train_s:.0f} s", flush=True)
    append_row(row, args.json)


if __name__ == "__main__":
    main()
