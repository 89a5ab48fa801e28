"""Empirical privacy audit: membership inference on a model (and its teacher).

Evidence, not a guarantee. Two attacks on the model's own per-example outputs:

* ``loss``: the loss-threshold attack of Yeom et al. (2018): members have lower
  loss; score = −CE(logits, y).
* ``lira_offline``: LiRA's statistic (Carlini et al. 2022) without shadow
  models: the logit-scaled confidence φ = log(p_y / (1 − p_y)) is modelled by one
  Gaussian for members and one for non-members; the score is the log
  likelihood ratio. The Gaussians are fitted on one half of the data and
  scored on the other (and vice versa), so the attack is not tuned on the
  examples it is measured on.

With ``--reference-models N`` (Carlini et al. 2022, Alg. 1 with a fixed
variance): N cheap reference students are trained on random halves of the
members ∪ non-members pool; for every example the reference models that did
(IN) and did not (OUT) train on it give per-example means of φ, which calibrate
for how easy each example is. ``lira_ref_offline`` scores φ − μ_out (one-sided),
``lira_ref_online`` the Gaussian likelihood ratio of IN vs OUT with one pooled
global variance.

Metrics: ROC AUC, attack advantage max(TPR − FPR), TPR at 0.1 % and 1 % FPR,
with percentile bootstrap confidence intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

def per_example_stats(logits: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    lp_y = logp[np.arange(len(labels)), labels]
    # log(p/(1−p)) computed stably from log p
    log1m = np.log(-np.expm1(np.minimum(lp_y, -1e-12)))
    return {"loss": -lp_y, "phi": lp_y - log1m}


def _lira_scores(phi_in: np.ndarray, phi_out: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Cross-fitted Gaussian likelihood-ratio scores for members and non-members."""
    def split(a):
        perm = rng.permutation(len(a))
        return perm[: len(a) // 2], perm[len(a) // 2 :]

    def llr(x, fit_in, fit_out):
        mi, si = fit_in.mean(), fit_in.std() + 1e-6
        mo, so = fit_out.mean(), fit_out.std() + 1e-6
        return (-0.5 * ((x - mi) / si) ** 2 - np.log(si)) - (-0.5 * ((x - mo) / so) ** 2 - np.log(so))

    (ia, ib), (oa, ob) = split(phi_in), split(phi_out)
    s_in, s_out = np.empty(len(phi_in)), np.empty(len(phi_out))
    s_in[ia], s_out[oa] = llr(phi_in[ia], phi_in[ib], phi_out[ob]), llr(phi_out[oa], phi_in[ib], phi_out[ob])
    s_in[ib], s_out[ob] = llr(phi_in[ib], phi_in[ia], phi_out[oa]), llr(phi_out[ob], phi_in[ia], phi_out[oa])
    return s_in, s_out


def roc_metrics(s_in: np.ndarray, s_out: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import roc_auc_score, roc_curve

    y = np.r_[np.ones(len(s_in)), np.zeros(len(s_out))]
    s = np.r_[s_in, s_out]
    fpr, tpr, _ = roc_curve(y, s)
    return {
        "auc": float(roc_auc_score(y, s)),
        "advantage": float(np.max(tpr - fpr)),
        "tpr_at_0.1%_fpr": float(np.interp(1e-3, fpr, tpr)),
        "tpr_at_1%_fpr": float(np.interp(1e-2, fpr, tpr)),
    }


@dataclass
class AttackResult:
    attack: str
    metrics: dict
    ci95: dict
    roc: tuple  # (fpr, tpr) for plotting

    def to_dict(self) -> dict:
        return {"attack": self.attack, **self.metrics, "ci95": self.ci95}


@dataclass
class ReferenceStats:
    """Per-example φ statistics of reference models over the pool [members; non-members]."""

    mu_in: np.ndarray
    mu_out: np.ndarray
    sd_in: float
    sd_out: float
    models: int

    @classmethod
    def from_phis(cls, phis: np.ndarray, masks: np.ndarray) -> "ReferenceStats":
        """``phis``/``masks``: (N models, pool). Examples with no IN (or OUT) model fall back to the global mean."""
        def side(sel):
            cnt = sel.sum(0)
            glob = phis[sel].mean()
            mu = np.where(cnt > 0, (phis * sel).sum(0) / np.maximum(cnt, 1), glob)
            resid = (phis - mu)[sel]
            return mu, float(resid.std() + 1e-6)

        (mi, si), (mo, so) = side(masks), side(~masks)
        return cls(mi, mo, si, so, len(phis))

    def scores(self, phi: np.ndarray) -> dict[str, np.ndarray]:
        # One pooled variance for IN and OUT: the log likelihood ratio is then linear and increasing in φ where
        # μ_in > μ_out, so a target more overfit than the cheap references is not scored as a non-member (with two
        # variances a φ far above both means favours the wider Gaussian).
        sd = math.sqrt((self.sd_in ** 2 + self.sd_out ** 2) / 2)
        online = (self.mu_in - self.mu_out) / sd ** 2 * (phi - (self.mu_in + self.mu_out) / 2)
        return {"lira_ref_offline": (phi - self.mu_out) / self.sd_out, "lira_ref_online": online}


def train_reference_models(x, y, spec, n: int, *, epochs: int = 3, seed: int = 0, on_progress: Optional[Callable] = None) -> ReferenceStats:
    """N reference students, each on an independent random half of the pool (x, y); φ of every pool example."""
    import torch

    from dpconvert.mechanisms.private_knn import train_classifier
    from dpconvert.students import create_student, default_student_name

    gen = torch.Generator().manual_seed(seed)
    masks, phis = [], []
    for i in range(n):
        torch.manual_seed(seed + 1000 + i)
        mask = torch.rand(len(x), generator=gen) < 0.5
        model = create_student(default_student_name(spec), spec)
        train_classifier(model, x[mask], y[mask], epochs=epochs, lr=2e-3, minibatch=128, generator=gen, flip=False)
        phis.append(per_example_stats(logits_of(model, x), y.numpy())["phi"])
        masks.append(mask.numpy())
        if on_progress:
            on_progress(i + 1, n)
    return ReferenceStats.from_phis(np.stack(phis), np.stack(masks))


def run_attacks(logits_in: np.ndarray, y_in: np.ndarray, logits_out: np.ndarray, y_out: np.ndarray, *,
                bootstrap: int = 200, seed: int = 0, reference: Optional[ReferenceStats] = None) -> list[AttackResult]:
    """``reference`` covers the pool [members; non-members] in this order."""
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(seed)
    st_in, st_out = per_example_stats(logits_in, y_in), per_example_stats(logits_out, y_out)
    scores = {"loss": (-st_in["loss"], -st_out["loss"]), "lira_offline": _lira_scores(st_in["phi"], st_out["phi"], rng)}
    if reference is not None:
        for name, sc in reference.scores(np.r_[st_in["phi"], st_out["phi"]]).items():
            scores[name] = (sc[: len(y_in)], sc[len(y_in):])
    results = []
    for name, (a, b) in scores.items():
        metrics = roc_metrics(a, b)
        boot = [roc_metrics(a[rng.integers(0, len(a), len(a))], b[rng.integers(0, len(b), len(b))]) for _ in range(bootstrap)]
        ci = {k: [float(np.percentile([m[k] for m in boot], 2.5)), float(np.percentile([m[k] for m in boot], 97.5))] for k in metrics}
        fpr, tpr, _ = roc_curve(np.r_[np.ones(len(a)), np.zeros(len(b))], np.r_[a, b])
        results.append(AttackResult(name, metrics, ci, (fpr, tpr)))
    return results


def logits_of(forward: Callable, x, batch: int = 1024) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return torch.cat([forward(c).float().cpu() for c in x.split(batch)]).numpy()


def plot_roc(curves: dict[str, list[AttackResult]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from dpconvert.errors import DpconvertError

        raise DpconvertError("`plot` needs matplotlib", fix="pip install matplotlib", param="plot") from None
    fig, ax = plt.subplots(figsize=(5, 5))
    for model, results in curves.items():
        for r in results:
            ax.plot(np.maximum(r.roc[0], 1e-5), np.maximum(r.roc[1], 1e-5), label=f"{model} {r.attack} (AUC {r.metrics['auc']:.3f})")
    ax.plot([1e-5, 1], [1e-5, 1], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="false positive rate", ylabel="true positive rate", title="membership inference")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


_REFERENCE_CACHE: dict = {}


def attack_targets(model_path: str, teacher: Optional[str] = None, load_options=None) -> dict:
    """{"model": the audited model, "teacher": the teacher when given}, loaded for an attack; the model's card (when it
    has one) says how its inputs are normalised, and then the teacher keeps its own normalisation."""
    from dataclasses import replace

    from dpconvert.io.teachers import LoadOptions, load_teacher

    opts = load_options or LoadOptions()
    card = _card_of(model_path)
    if card is not None:
        m = card.data["model"]
        opts = replace(opts, mean=opts.mean or tuple(m["mean"]), std=opts.std or tuple(m["std"]))
    targets = {"model": load_teacher(model_path, opts)}
    if teacher:
        targets["teacher"] = load_teacher(teacher, replace(opts, mean=None, std=None) if card is not None else opts)
    return targets


def membership_audit(model_path: str, members: str, non_members: str, *, teacher: Optional[str] = None, load_options=None,
                     limit: Optional[int] = None, bootstrap: int = 200, seed: int = 0, reference_models: int = 0,
                     reference_epochs: int = 3, on_progress: Optional[Callable] = None) -> dict[str, list[AttackResult]]:
    """Attack the model (and the teacher, when given) on the same members / non-members.

    With ``reference_models`` > 0 the reference students are trained once (on the
    model's input normalisation) and calibrate the attacks on every target.
    """

    from dpconvert.io.data import load_data
    from dpconvert.errors import DpconvertError

    if reference_models == 1 or reference_models < 0:
        raise DpconvertError(fix="`reference_models` needs at least 2 models (each example must be IN for some and OUT for others)", param="reference_models")
    targets = attack_targets(model_path, teacher, load_options)
    out, reference = {}, None
    for name, t in targets.items():
        mem = load_data(members, t.spec, require_labels=True)
        non = load_data(non_members, t.spec, require_labels=True)
        if limit:
            mem.x, mem.y, non.x, non.y = mem.x[:limit], mem.y[:limit], non.x[:limit], non.y[:limit]
        if len(mem) < 10 or len(non) < 10:
            raise DpconvertError(fix="membership inference needs at least 10 members and 10 non-members")
        if reference_models and reference is None:
            import torch

            # one set of reference students per (data, input spec, settings): a zoo audit trains them once
            key = (members, non_members, limit, t.spec, reference_models, reference_epochs, seed)
            if key not in _REFERENCE_CACHE:
                _REFERENCE_CACHE[key] = train_reference_models(torch.cat([mem.x, non.x]), torch.cat([mem.y, non.y]).long(), t.spec,
                                                               reference_models, epochs=reference_epochs, seed=seed, on_progress=on_progress)
            reference = _REFERENCE_CACHE[key]
        out[name] = run_attacks(logits_of(t, mem.x), mem.y.numpy(), logits_of(t, non.x), non.y.numpy(), bootstrap=bootstrap,
                                seed=seed, reference=reference)
    return out


def _card_of(model_path: str):
    from pathlib import Path

    from dpconvert.zoo_cards import PrivacyCard, card_paths

    sidecar, _ = card_paths(model_path)
    return PrivacyCard.read(sidecar) if Path(sidecar).exists() else None


def record_in_card(model_path: str, results: dict, members: str, non_members: str) -> None:
    """Put the attack results in the card's ``audit`` block (sidecar and embedded copy, written atomically).

    Labelled empirical: it is evidence about this model, never part of the guarantee.
    The model hash covers the graph only, so updating the embedded card leaves it valid.
    """
    import datetime as _dt

    import onnx

    from dpconvert.zoo_cards.onnx_meta import write_model_with_card

    from dpconvert.errors import DpconvertError

    card = _card_of(model_path)
    if card is None or not model_path.endswith(".onnx"):
        raise DpconvertError(fix=f"{model_path}: `write_card` needs an ONNX model with a privacy card", param="write_card")
    if card.data.get("signature"):  # the signature covers the whole card: an added block would silently void it
        raise DpconvertError(f"{model_path}: the card is signed and `write_card` would change it, voiding the signature",
                             fix="audit without `write_card` (the JSON report keeps the results), or write them and sign the model again (card sign)", param="write_card")
    kept = {k: v for k, v in (card.data.get("audit") or {}).items() if k == "canary"}  # the conversion's canary audit stays
    card.data["audit"] = {
        **kept,
        "kind": "empirical membership inference — evidence, not a DP guarantee",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "members": members,
        "non_members": non_members,
        "results": results,
    }
    card.validate("card with audit block")
    write_model_with_card(model_path, onnx.load(model_path), card)


def membership_audits(results, members, non_members, *, teacher=None, limit=None, plot=None, load_options=None, reference_models: int = 0,
                      reference_epochs: int = 3, on_progress=None) -> dict:
    """Membership-inference attacks on every audited model (cards alone are skipped): {model path: {target: {attack:
    its metrics}}}; ``plot``: also write the ROC curves to this PNG."""
    from pathlib import Path

    report, curves = {}, {}
    for r in results:
        if r.path.endswith(".card.json"):
            continue
        res = membership_audit(r.path, members, non_members, teacher=teacher, load_options=load_options, limit=limit,
                               reference_models=reference_models, reference_epochs=reference_epochs, on_progress=on_progress)
        report[r.path] = {target: {a.attack: a.to_dict() for a in attacks} for target, attacks in res.items()}
        curves.update({f"{Path(r.path).name}:{target}": attacks for target, attacks in res.items()})
    if plot is not None:
        plot_roc(curves, str(plot))
    return report
