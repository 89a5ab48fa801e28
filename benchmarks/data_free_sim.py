"""Design simulation for data-free per-image targets: which prior, how many images, which post-processing.

A default conversion answers R rows about N fixed prior images (R/N views each) and trains the student on the
per-image means of the released rows. The mean of m released rows is the clean mean plus Gaussian noise of variance
(γ·σ·C)²/m per entry, so a variant can be scored without answering R rows: the clean per-image targets are the means
over ``--clean-views`` answered views (cached per teacher, prior, N and seed), the release's noise is added for
m = R/N, and the product's own denoiser, student trainer and logit adjustment run on them. The only difference from
a real run: the clean mean is over fewer views (a little extra variance, so the simulation errs low). Variants:

* ``--prior``: any registered data-free prior (e.g. ``centred_fields``, ``mirrored_fields``);
* ``--images``: N (several, comma-separated); ``--rows``: R;
* ``--pool K``: noise pooled across images (post-processing): a first student trained on the denoised targets, each
  target then averaged with its K nearest neighbours in that student's penultimate features, and a second student
  trained on the pooled targets;
* ``--shrink``: a second student trained on each target's posterior mean under a Gaussian prior centred on a first
  student's answer (ALIBI-style; post-processing);
* ``--logit-adjust both``: with and without the logit adjustment;
* ``--import prior_variants``: candidate priors registered by a benchmark module (``--prior framed_fields``), and
  ``--prior a+b``: a mixture, n/k images from each.
* ``--student``: another registered student; ``--input-size``/``--mean``/``--std``: as ``dpconvert``'s, for teachers
  whose file does not say (the published CIFAR-10 model).

    python benchmarks/data_free_sim.py --teacher benchmarks/runs/fmnist_cnn.safetensors \
        --eval-data benchmarks/runs/fmnist_eval_last5k.npz --images 2500,10000 --eps 1,inf --seeds 0,1,2
    python benchmarks/data_free_sim.py --teacher benchmarks/runs/fmnist_resnet34_64.safetensors --eval-data \
        benchmarks/runs/fmnist_eval_last5k.npz --prior framed_fields --images 500 --rows 1.5e5 --denoise none --shrink
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F


def clean_targets(teacher, prior_name: str, spec, n: int, views: int, seed: int, cache: Path, loss: str = "logits", tau: float = 4.0):
    """(fixed prior images, their clean per-image targets −γ·mean of the normalised rows at s = 0 over ``views`` views;
    ``loss``: the product's L_T, whose output gradient is the row)."""
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.mechanisms.output_gradients import per_sample_output_gradient
    from dpconvert.methods.dpdfd_options import DpdfdOptions, fixed_prior_images
    from dpconvert.options import RunOptions

    row_cfg = SimpleNamespace(distill_loss=loss, kd_temperature=tau)
    tag = "" if loss == "logits" else f"_{loss}{tau if loss == 'kd' else ''}"
    path = cache / f"{Path(teacher.source).stem}_{prior_name}_{n}_{views}_{seed}{tag}.pt"
    if "+" in prior_name:  # a mixture: n/k images from each of k priors, in blocks (family f holds images f·n/k …)
        from dpconvert.generators.public_images import PublicImageSource
        from dpconvert.methods.dpdfd_options import draw_prior_images

        names = prior_name.split("+")
        source = PublicImageSource(torch.cat([draw_prior_images(RunOptions(seed=seed), DpdfdOptions(prior=name), spec, n // len(names))
                                              for name in names]), mix_prob=0.0, public=False)
    else:
        source, _ = fixed_prior_images(RunOptions(seed=seed), DpdfdOptions(prior=prior_name), spec, n)  # the product's own images
    if path.exists():
        return source, torch.load(path)
    g = torch.Generator().manual_seed(seed + 77)
    sums = torch.zeros(n, spec.num_classes)
    with torch.inference_mode():
        for _ in range(views):
            for idx in torch.arange(n).split(1024):
                t = teacher(source.augment(idx, torch.randn(len(idx), source.nz, generator=g))).float()
                r = -per_sample_output_gradient(torch.zeros_like(t), t, row_cfg)  # at s = 0 the target direction is −g
                sums[idx] += r / r.norm(dim=1, keepdim=True).clamp_min(1e-12)
    clean = DpdfdConfig.target_step * sums / views
    torch.save(clean, path)
    return source, clean


def train(spec, source, idx, targets, cfg, student_name: str):
    from dpconvert.distill.models import StudentModel, batched
    from dpconvert.distill.progress import Progress
    from dpconvert.distill.student_training import StudentTrainer, adjust_for_query_prior
    from dpconvert.distributed import World
    from dpconvert.students import create_student

    torch.manual_seed(cfg.seed)
    student = StudentModel(create_student(student_name, spec), "cpu", None, World())
    trainer = StudentTrainer(cfg, student, torch.Generator().manual_seed(cfg.seed + 5), World(), Progress())
    trainer.on_sources(idx, targets, source.augment, source.nz, "sim")
    student.module.eval()
    shift = adjust_for_query_prior(student, lambda: batched(student, source.base_images(idx), 1024)) if cfg.logit_adjust else None
    return student, shift


@torch.no_grad()
def accuracy(student, data, shift=None) -> tuple[float, float]:
    logits = torch.cat([student(x) for x in data.x.split(1000)])
    plain = logits + shift if shift is not None else logits  # the student before its logit adjustment
    return (float((logits.argmax(1) == data.y).float().mean()), float((plain.argmax(1) == data.y).float().mean()))


def balanced(targets: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(image indices, their targets) drawn with weight 1/(count of each target's top class): every top class equally
    often (released targets only: post-processing)."""
    top = targets.argmax(1)
    weight = 1.0 / torch.bincount(top)[top].double()
    idx = torch.multinomial(weight, len(targets), replacement=True, generator=torch.Generator().manual_seed(seed + 3))
    return idx, targets[idx]


@torch.no_grad()
def pooled(student, source, idx, targets, k: int) -> torch.Tensor:
    """Each target averaged with its k nearest neighbours (cosine) in the student's penultimate features."""
    from dpconvert.distill.models import classifier

    feats = []
    head = classifier(student.module)
    hook = head.register_forward_hook(lambda m, i, o: feats.append(i[0].detach()))
    for c in idx.split(1024):
        student(source.base_images(c))
    hook.remove()
    f = F.normalize(torch.cat(feats), dim=1)
    out = torch.empty_like(targets)
    for s in torch.arange(len(f)).split(2048):
        near = (f[s] @ f.T).topk(k, dim=1).indices
        out[s] = targets[near].mean(1)
    return out


@torch.no_grad()
def shrunk(student, source, idx, targets, var: float) -> torch.Tensor:
    """The product's ``shrink_towards`` (an ALIBI-style posterior mean towards the first student's answers) on the
    simulated targets: post-processing of released targets."""
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.distill.source_targets import shrink_towards

    logits = torch.cat([student(source.base_images(c)).float() for c in idx.split(1024)])
    return shrink_towards(targets, torch.full((len(targets),), var), logits, DpdfdConfig.target_step)


def main() -> None:
    from dpconvert.accounting.calibrate import dpdfd_sigma
    from dpconvert.distill.config import DpdfdConfig
    from dpconvert.methods.dpdfd_options import DpdfdOptions, engine_option_settings
    from dpconvert.io.data import load_data
    from dpconvert.io.teachers import load_teacher
    from dpconvert.distill.source_targets import DENOISERS
    from dpconvert.students import default_student_name

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", required=True)
    p.add_argument("--eval-data", required=True)
    p.add_argument("--prior", default="centred_fields")
    p.add_argument("--images", default="2500")
    p.add_argument("--rows", type=float, default=1e6)
    p.add_argument("--clean-views", type=int, default=16)
    p.add_argument("--eps", default="1")
    p.add_argument("--delta", type=float, default=1e-5, help="the product's default is 1/R (1e-6 for a million rows)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--pool", type=int, default=0)
    p.add_argument("--balance", action="store_true", help="the student's images drawn with weight 1/(count of their target's top "
                   "class): the issue's sigma = 0 lever, here on the denoised per-image targets (post-processing)")
    p.add_argument("--shrink", action="store_true", help="a second student on targets shrunk towards the first student's answers")
    p.add_argument("--logit-adjust", choices=("on", "off", "both"), default="on")
    p.add_argument("--student-samples", type=int, default=DpdfdConfig.student_samples)
    p.add_argument("--denoise", default="bayes")
    p.add_argument("--loss", default="logits", choices=("logits", "ce", "kd"), help="L_T, whose output gradient each row is")
    p.add_argument("--kd-temperature", type=float, default=4.0)
    p.add_argument("--cache", default="/tmp/data_free_sim")
    p.add_argument("--student", default=None, help="a registered student (default: the product's for the input)")
    p.add_argument("--input-size", default=None, help="C,H,W for teachers whose file does not say (as dpconvert's)")
    p.add_argument("--mean", default=None)
    p.add_argument("--std", default=None)
    p.add_argument("--json")
    p.add_argument("--import", dest="imports", default="", help="modules that register candidate priors (prior_variants)")
    a = p.parse_args()
    for module in filter(None, a.imports.split(",")):
        importlib.import_module(module)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    from dpconvert.io.teachers import LoadOptions
    from dpconvert.io.spec import parse_size

    floats = lambda v: tuple(float(x) for x in v.split(",")) if v else None  # noqa: E731
    teacher = load_teacher(a.teacher, LoadOptions(input_size=parse_size(a.input_size) if a.input_size else None,
                                                  mean=floats(a.mean), std=floats(a.std)))
    spec = teacher.spec
    data = load_data(a.eval_data, spec, require_labels=True)
    student_name = a.student or default_student_name(spec)
    adjust = {"on": [True], "off": [False], "both": [True, False]}[a.logit_adjust]
    for seed in map(int, a.seeds.split(",")):
        for n in map(int, a.images.split(",")):
            t0 = time.time()
            source, clean = clean_targets(teacher, a.prior, spec, n, a.clean_views, seed, cache, a.loss, a.kd_temperature)
            t_clean = time.time() - t0
            for eps in a.eps.split(","):
                sigma = 0.0 if eps == "inf" else dpdfd_sigma(eps=float(eps), delta=a.delta, steps=1)
                var = (DpdfdConfig.target_step * sigma) ** 2 * n / a.rows
                g = torch.Generator().manual_seed(seed + 1000)
                noisy = clean + math.sqrt(var) * torch.randn(clean.shape, generator=g)
                targets = DENOISERS.get(a.denoise)(noisy, torch.full((n,), var, dtype=torch.float64), seed)
                unique, unique_targets = torch.arange(n), targets
                top_agreement = round(float((targets.argmax(1) == clean.argmax(1)).float().mean()), 4)
                idx, targets = balanced(unique_targets, seed) if a.balance else (unique, unique_targets)
                for la in adjust:
                    cfg = DpdfdConfig(**{**engine_option_settings(DpdfdOptions(), spec), "logit_adjust": la}, student_data="sources", seed=seed,
                                      student_samples=a.student_samples)
                    t1 = time.time()
                    student, shift = train(spec, source, idx, targets, cfg, student_name)
                    acc, plain = accuracy(student, data, shift)
                    row = {"prior": a.prior, "teacher": Path(a.teacher).name, "student": student_name, **({"loss": a.loss} if a.loss != "logits" else {}),
                           **({"kd_temperature": a.kd_temperature} if a.loss == "kd" else {}), "images": n, "rows": a.rows, "eps": eps, "delta": a.delta, "seed": seed, "logit_adjust": la,
                           "denoise": a.denoise, **({"balance": True} if a.balance else {}), "student_samples": a.student_samples, "accuracy": round(acc, 4),
                           "accuracy_before_adjust": round(plain, 4),
                           "target_top_agreement": top_agreement,
                           "clean_s": round(t_clean, 1), "student_s": round(time.time() - t1, 1)}
                    if a.pool:
                        t2 = time.time()
                        pooled_targets = pooled(student, source, unique, unique_targets, a.pool)  # over distinct images
                        second, shift2 = train(spec, source, *(balanced(pooled_targets, seed) if a.balance else (unique, pooled_targets)),
                                               cfg, student_name)
                        row.update(pool=a.pool, pooled_accuracy=round(accuracy(second, data, shift2)[0], 4), pool_s=round(time.time() - t2, 1),
                                   pooled_top_agreement=round(float((pooled_targets.argmax(1) == clean.argmax(1)).float().mean()), 4))
                    if a.shrink:
                        t2 = time.time()
                        second, shift2 = train(spec, source, idx, shrunk(student, source, idx, targets, var), cfg, student_name)
                        row.update(shrink=True, shrunk_accuracy=round(accuracy(second, data, shift2)[0], 4), shrink_s=round(time.time() - t2, 1))
                    print(json.dumps(row), flush=True)
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
