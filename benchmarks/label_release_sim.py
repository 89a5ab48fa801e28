"""Design experiment: would a label release (randomized response) beat DPDFD's Gaussian rows out of domain?

Out of domain (the 5 000 MNIST digits of ``prepare_ood.py`` as queries, the Fashion-MNIST CNN teacher) the student
needs the teacher's answer to each *view* (benchmarks/RESULTS.md, table 3). At query-level ε = 1 every view is
answered once, so each row may be released by its own ε-DP mechanism (one teacher answer moves one row). For a
10-class argmax, randomized response at ε = 1 keeps the true class with probability e/(e + 9) = 0.23, and
RR-with-prior ("Deep Learning with Label Differential Privacy", Ghazi et al. 2021) randomises over the k classes a
prior ranks highest, choosing k to maximise P(true class kept). This script caches clean teacher answers to views
drawn by the product's ``PublicImageSource`` (rows defaults), simulates the release, and trains the default
datalens student on it with the exact likelihood of the released label (a forward-corrected loss):

* ``clean_hard``: the teacher's argmax, no noise (what a label release can at best approach);
* ``rr``: randomized response over all 10 classes on every row;
* ``rrimg``: two stages over disjoint rows. Stage 1 (``--stage1`` of the rows): RR over all classes; the released
  labels of each source image's views give a debiased per-image class prior (post-processing). Stage 2: RR-with-prior
  over the top-k classes of that prior.

    python benchmarks/label_release_sim.py --views 400000 --cache /tmp/ood_views.pt           # ~5 min: teacher answers
    python benchmarks/label_release_sim.py --cache /tmp/ood_views.pt --scheme rr --n 200000 --epochs 3

Nothing here is a product path: the noise is simulated from a seed.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

TEACHER = "benchmarks/runs/fmnist_cnn.safetensors"
OOD = "benchmarks/runs/mnist5k_ood.npz"
EVAL = "benchmarks/runs/fmnist_eval_last5k.npz"


def cache_views(n: int, out: str) -> None:
    """n views of the OOD images (rows defaults: shifts, flips, 30 % mixup) with the teacher's clean logits."""
    from dpconvert.generators.public_images import PublicImageSource
    from dpconvert.io.data import load_data
    from dpconvert.io.teachers import load_teacher

    teacher = load_teacher(TEACHER)
    source = PublicImageSource(torch.as_tensor(load_data(OOD, teacher.spec).x), seed=0)
    g = torch.Generator().manual_seed(123)
    xs, logits, srcs = [], [], []
    with torch.inference_mode():
        for i in range(0, n, 4096):
            z = torch.randn(min(4096, n - i), 7, generator=g)
            x = source(z)
            logits.append(teacher(x).float())
            xs.append(x.half())
            srcs.append(source.base_index(z))
    torch.save({"x": torch.cat(xs), "logits": torch.cat(logits), "src": torch.cat(srcs)}, out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", required=True, help="views + clean teacher logits (written with --views)")
    p.add_argument("--views", type=int, help="write the cache with this many views and stop")
    p.add_argument("--n", type=int, default=200_000, help="rows released (the first n cached views)")
    p.add_argument("--scheme", default="rr", choices=("clean_hard", "rr", "rrimg"))
    p.add_argument("--eps", type=float, default=1.0, help="ε of each row's release (query-level ε)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--stage1", type=float, default=0.5, help="rrimg: share of the rows in stage 1")
    p.add_argument("--kmax", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="append the result row to this JSON list")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.views:
        return cache_views(a.views, a.cache)
    torch.manual_seed(a.seed)
    result = run(a)
    print(json.dumps(result), flush=True)
    if a.json:
        from _results import append_row

        append_row(result, a.json)


def run(a) -> dict:
    from dpconvert.io.data import load_data
    from dpconvert.io.teachers import load_teacher
    from dpconvert.students.factory import create_student

    spec = load_teacher(TEACHER).spec
    ev = load_data(EVAL, spec, require_labels=True)
    ex, ey = torch.as_tensor(ev.x).float(), torch.as_tensor(ev.y).long()
    d = torch.load(a.cache)
    X, T = d["x"][: a.n], d["logits"][: a.n]
    n, K = T.shape
    g = torch.Generator().manual_seed(a.seed + 99)
    y = T.argmax(1)
    e = math.exp(a.eps)

    def rr_release(y, cand):
        """RR over each row's candidate set: the true class with prob e/(e + k − 1), else another member; uniform over
        the set when the true class is not in it."""
        k = cand.sum(1)
        rows = torch.arange(len(y))
        keep = torch.rand(len(y), generator=g) < e / (e + k - 1)
        others = cand.float().clone()
        others[rows, y] = 0
        other = torch.multinomial(others + 1e-12 * (others.sum(1, keepdim=True) == 0), 1, generator=g).squeeze(1)
        uniform = torch.multinomial(cand.float(), 1, generator=g).squeeze(1)
        return torch.where(cand[rows, y], torch.where(keep, y, other), uniform)

    def channel(cand, released):
        """P(released | true class c) for every c: the likelihood the student is trained on."""
        k = cand.sum(1, keepdim=True).float()
        inside = torch.where(torch.arange(K)[None] == released[:, None], e / (e + k - 1), 1 / (e + k - 1))
        return torch.where(cand, inside, 1 / k)

    def evaluate(m):
        m.eval()
        with torch.no_grad():
            correct = sum(int((m(ex[i:i + 1000]).argmax(1) == ey[i:i + 1000]).sum()) for i in range(0, len(ex), 1000))
        return correct / len(ex)

    def train(lossfn):
        m = create_student("datalens_cnn", spec)
        opt = torch.optim.Adam(m.parameters(), lr=a.lr)
        steps = a.epochs * math.ceil(n / 256)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=steps, pct_start=0.15)
        for _ in range(a.epochs):
            for b in torch.randperm(n, generator=g).split(256):
                loss = lossfn(m(X[b].float()), b)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
        return m

    t0 = time.time()
    info: dict = {}
    if a.scheme == "clean_hard":
        model = train(lambda s, b: F.cross_entropy(s, y[b]))
    else:
        cand = torch.ones(n, K, dtype=torch.bool)
        released = torch.empty(n, dtype=torch.long)
        n1 = n if a.scheme == "rr" else int(a.stage1 * n)
        released[:n1] = rr_release(y[:n1], cand[:n1])
        if a.scheme == "rrimg":
            cand[n1:], released[n1:] = _rr_with_image_prior(d["src"][: a.n], released, y, n1, K, e, a.kmax, rr_release, info)
        info["released_correct"] = float((released == y).float().mean())

        def nll(s, b):
            return -torch.logsumexp(F.log_softmax(s, 1) + channel(cand[b], released[b]).clamp_min(1e-12).log(), 1).mean()

        model = train(nll)
    return {"scheme": a.scheme, "rows": n, "eps_per_row": a.eps, "epochs": a.epochs, "stage1": a.stage1 if a.scheme == "rrimg" else None,
            "seed": a.seed, "student_accuracy": evaluate(model), "seconds": round(time.time() - t0, 1), **info,
            "command": "python benchmarks/label_release_sim.py --cache CACHE --scheme {} --n {} --epochs {}{}".format(
                a.scheme, n, a.epochs, f" --stage1 {a.stage1}" if a.scheme == "rrimg" else "")}


def _rr_with_image_prior(src, released, y, n1, K, e, kmax, rr_release, info):
    """Stage 2: each view's prior is its source image's class frequencies among the stage-1 labels, debiased for RR
    and shrunk towards the overall mix (mixup views, with no single source, get the overall mix); k chosen per row as
    argmax_k (prior mass of the top k)·e/(e + k − 1)."""
    from dpconvert.distill.source_targets import SourceTargets

    q, p_keep = 1 / (e + K - 1), e / (e + K - 1)
    labels = SourceTargets(int(src.max()) + 1, K)  # per image: counts of each released stage-1 label (mixup views skipped)
    labels.add(src[:n1], F.one_hot(released[:n1], K))
    counts, total = labels.sums.float(), labels.counts[:, None].float()
    overall = ((counts.sum(0) / counts.sum() - q) / (p_keep - q)).clamp_min(0.01)
    overall /= overall.sum()
    prior = ((counts / total.clamp_min(1) - q) / (p_keep - q)).clamp_min(0)
    prior = (prior * total + 2 * overall) / (prior * total + 2 * overall).sum(1, keepdim=True)
    rest = src[n1:]
    pr = torch.where((rest >= 0)[:, None], prior[rest.clamp_min(0)], overall.expand(len(rest), K))
    ranked, order = pr.sort(1, descending=True)
    ks = torch.arange(1, kmax + 1)
    kstar = (ranked.cumsum(1)[:, :kmax] * e / (e + ks - 1)).argmax(1) + 1
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(K).expand_as(order).contiguous())
    cand = rank < kstar[:, None]
    out = rr_release(y[n1:], cand)
    info.update(stage2_true_class_in_set=float(cand[torch.arange(len(rest)), y[n1:]].float().mean()),
                stage2_released_correct=float((out == y[n1:]).float().mean()))
    return cand, out


if __name__ == "__main__":
    main()
