"""Commands beyond inspect, registered on the same Typer app."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from .cli import app
from . import console
from .console import out


# Private-kNN options shared by `plan --method pknn` and `convert --method pknn`.
K = Annotated[int, typer.Option("--k", help="Private-kNN: neighbours.")]
SamplingRate = Annotated[float, typer.Option("--sampling-rate", help="Private-kNN: Poisson sampling rate γ.")]
Sigma1 = Annotated[float, typer.Option("--sigma1", help="Private-kNN: screening noise σ1.")]
Threshold = Annotated[Optional[float], typer.Option("--threshold", help="Private-kNN: screening threshold (default 0.4·k).")]
Sigma2 = Annotated[Optional[float], typer.Option("--sigma2", help="Private-kNN: argmax noise (default: calibrated to --eps).")]
Queries = Annotated[Optional[int], typer.Option("--queries", help="Private-kNN: queries screened (default: plan 1000; convert all public images).")]
PKNN_DEFAULTS = {"k": 300, "sampling_rate": 0.1, "sigma1": 50.0, "threshold_ratio": 0.4, "rounds": 2, "features": "hog_pca",
                 "labels": "soft", "knn": "auto"}  # = PknnConfig's (tests check; no torch import here)


# ------------------------------------------------------------------ plan
@app.command()
def plan(
    method: Annotated[str, typer.Option("--method", help="dpdfd or pknn.")] = "dpdfd",
    eps: Annotated[Optional[float], typer.Option("--eps", help="Target ε (calibrates the noise).")] = None,
    delta: Annotated[float, typer.Option("--delta", help="Target δ.")] = 1e-5,
    n: Annotated[Optional[int], typer.Option("--n", help="Private set size, if known (checks δ ≤ 1/n).")] = None,
    steps: Annotated[int, typer.Option("--steps", help="DPDFD: number of noisy releases T.")] = 720,
    batch_size: Annotated[int, typer.Option("--batch-size", help="DPDFD: rows per release B (only the record-level bound depends on it).")] = 256,
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="DPDFD: use this σ and compute ε instead of calibrating.")] = None,
    k: K = PKNN_DEFAULTS["k"],
    sampling_rate: SamplingRate = PKNN_DEFAULTS["sampling_rate"],
    sigma1: Sigma1 = PKNN_DEFAULTS["sigma1"],
    threshold: Threshold = None,
    sigma2: Sigma2 = None,
    num_classes: Annotated[int, typer.Option("--num-classes", help="Private-kNN: classes.")] = 10,
    queries: Queries = None,
    answered: Annotated[Optional[int], typer.Option("--answered", help="Private-kNN: queries answered (default: all).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Plan a privacy budget: the noise for a target ε, and ε by each accountant."""
    from .errors import DpconvertError
    from .planning import plan_dpdfd, plan_pknn

    if method == "dpdfd":
        result = plan_dpdfd(eps=eps, delta=delta, steps=steps, batch_size=batch_size, noise_multiplier=noise_multiplier, n=n)
    elif method == "pknn":
        result = plan_pknn(eps=eps, delta=delta, k=k, sampling_rate=sampling_rate, sigma1=sigma1,
                           threshold=threshold if threshold is not None else PKNN_DEFAULTS["threshold_ratio"] * k, sigma2=sigma2, num_classes=num_classes,
                           queries=queries or 1000, answered=(queries or 1000) if answered is None else answered, n=n)
    else:
        raise DpconvertError(f"unknown --method {method!r}; choose dpdfd or pknn")
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print_plan(result)


def print_plan(result: dict, to=None) -> None:
    from rich.table import Table

    to = to or out

    table = Table(title=f"privacy plan ({result['method']}, scope {result['scope']}, δ={result['delta']:g})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    if result["method"] == "dpdfd":
        sig = f"{result['sigma']:.4f}" + (" (calibrated)" if result["calibrated"] else "")
        rows = [("noise multiplier σ", sig), ("noisy releases T", str(result["steps"])), ("batch size B", str(result["batch_size"]))]
    else:
        sig = f"{result['sigma2']:.4f}" + (" (calibrated)" if result["calibrated"] else "")
        rows = [("k", str(result["k"])), ("sampling rate γ", f"{result['sampling_rate']:g}"), ("σ1 (screening)", f"{result['sigma1']:g}"),
                ("threshold", f"{result['threshold']:g}"), ("σ2 (argmax)", sig), ("queries asked / answered", f"{result['queries_asked']} / {result['queries_answered']}")]
    for name, value in result["accountants"].items():
        rows.append((f"ε ({name})", f"{value:.4f}"))
    rows.append(("ε reported", f"{result['epsilon']:.4f}"))
    if "replace_one_epsilon" in result:
        rows.append(("ε, replace-one answer", f"{result['replace_one_epsilon']:.4f}"))
    if "record_level_epsilon" in result:
        rows.append(("ε, record-level worst case", f"{result['record_level_epsilon']:.4f}"))
    for r in rows:
        table.add_row(*r)
    to.print(table)
    to.print(f"adjacency: {result['adjacency']}")
    if result.get("method_choice"):
        to.print(f"method {result['method']}: {result['method_choice']}")


# ------------------------------------------------------------------ convert (the main job)
from pathlib import Path  # noqa: E402

from .cli import Arch, Device, InChans, InputSize, Mean, NumClasses, Std, TrustPickle, Weights, _load_options  # noqa: E402


@app.command()
def convert(
    teacher: Annotated[str, typer.Argument(help="Teacher: a file (.pt/.pth/.pt2/.safetensors/.onnx), timm:NAME or builtin:digits.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output student, an .onnx file; the card goes to OUT.card.json / OUT.card.md.")] = Path("student.onnx"),
    eps: Annotated[Optional[float], typer.Option("--eps", help="Target ε (query-level, see the card); σ is calibrated to it.")] = 1.0,
    delta: Annotated[float, typer.Option("--delta", help="Target δ.")] = 1e-5,
    noise_multiplier: Annotated[Optional[float], typer.Option("--noise-multiplier", help="Use this σ instead of calibrating; ε is computed and printed.")] = None,
    steps: Annotated[int, typer.Option("--steps", help="Noisy releases T (ε depends on σ and T only; each release adds √T to the noise).")] = 1,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Rows per release B (default from the input size; free for query-level ε).")] = None,
    clip: Annotated[float, typer.Option("--clip", help="Row norm C of the normalised output gradients.")] = 1.0,
    student: Annotated[Optional[str], typer.Option("--student", help="Student architecture: a registered name or timm:NAME (default from the input size).")] = None,
    generator: Annotated[Optional[str], typer.Option("--generator", help="A learned generator mixed with the random-field prior (e.g. dafl); default: prior only.")] = None,
    prior: Annotated[Optional[str], typer.Option("--prior", help="The data-free query prior (DPDFD; Private-kNN with --query-generator prior or train): random_fields (smooth blobs and strokes) or centred_fields (the same inside a centred ellipse: an object on a dark background). Default: from the input size for DPDFD, random_fields for Private-kNN's prior queries.")] = None,
    distill_loss: Annotated[Optional[str], typer.Option("--distill-loss", help="DPDFD's L_T: logits (default: centred logit matching, the whole class ranking per query), ce (the paper's: teacher argmax only) or kd.")] = None,
    epochs: Annotated[Optional[int], typer.Option("--epochs", help="Student passes over the released pairs after each release (default from the input size).")] = None,
    eval_data: Annotated[Optional[str], typer.Option("--eval-data", help="Labelled data to report accuracy on (not covered by the guarantee).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for everything but the DP noise (queries, student, training order); the noise is secret unless --seeded-noise.")] = 0,
    device: Device = "cpu",
    arch: Arch = None,
    num_classes: NumClasses = None,
    in_chans: InChans = None,
    input_size: InputSize = None,
    mean: Mean = None,
    std: Std = None,
    weights: Weights = None,
    trust_pickle: TrustPickle = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the card as JSON at the end instead of the summary table.")] = False,
    method: Annotated[str, typer.Option("--method", help="dpdfd (data-free, query-level), pknn (record-level, needs --private-data) or auto.")] = "auto",
    private_data: Annotated[Optional[str], typer.Option("--private-data", help="Private-kNN: the labelled private training data (any reader).")] = None,
    public_data: Annotated[Optional[str], typer.Option("--public-data", help="Unlabelled public images used as queries (Private-kNN: labelled by the private data; DPDFD: replaces the data-free prior, marked on the card).")] = None,
    k: K = PKNN_DEFAULTS["k"],
    sampling_rate: SamplingRate = PKNN_DEFAULTS["sampling_rate"],
    sigma1: Sigma1 = PKNN_DEFAULTS["sigma1"],
    threshold: Threshold = None,
    sigma2: Sigma2 = None,
    rounds: Annotated[int, typer.Option("--rounds", help="Private-kNN: rounds (features refined by the student).")] = PKNN_DEFAULTS["rounds"],
    queries: Queries = None,
    features: Annotated[str, typer.Option("--features", help="Private-kNN: first-round features: hog_pca (HOG whitened on the public images' principal directions), hog, or timm:NAME[@FILE] (a public pretrained backbone; FILE = local weights).")] = PKNN_DEFAULTS["features"],
    canaries: Annotated[int, typer.Option("--canaries", help="Private-kNN: one-run canary audit with N canaries (empirical ε lower bound on the card).")] = 0,
    knn: Annotated[str, typer.Option("--knn", help="Private-kNN search: exact (torch), faiss (optional extra, for ≥1M records) or auto.")] = PKNN_DEFAULTS["knn"],
    labels: Annotated[str, typer.Option("--labels", help="Private-kNN: student targets from the released noisy vote histogram: soft (tempered softmax) or hard (argmax). Same ε.")] = PKNN_DEFAULTS["labels"],
    save_generator: Annotated[Optional[str], typer.Option("--save-generator", help="Save the learned generator and its DPDFD cost to FILE.safetensors (DPDFD with --generator; Private-kNN with --query-generator train).")] = None,
    query_generator: Annotated[Optional[str], typer.Option("--query-generator", help="Private-kNN: queries from a generator FILE saved with --save-generator (its cost is composed in), 'train' (DPDFD trains one in this run, cost composed in) or 'prior' (data-independent).")] = None,
    seeded_noise: Annotated[bool, typer.Option("--seeded-noise", help="For tests and benchmarks only: draw the DP noise and subsamples from --seed (reproducible, NOT secret: anyone with the card can regenerate the noise; the card says so and audit fails it unless --allow-seeded-noise). Default: secret noise from OS entropy, never recorded.")] = False,
    sign_key: Annotated[Optional[Path], typer.Option("--sign-key", help="Sign the card with this Ed25519 private key (dpconvert card keygen); audit --trusted-keys checks it.")] = None,
    pixel_range: Annotated[Optional[float], typer.Option("--pixel-range", help="Maximum pixel value of data stored as float or wide integers (e.g. 255); default: uint8 is 0..255, float must be in [0, 1]. Never inferred from the data.")] = None,
    generator_eps: Annotated[Optional[float], typer.Option("--generator-eps", help="Private-kNN with --query-generator train: the generator's share of --eps (default half); the rest labels the queries.")] = None,
) -> None:
    """Convert TEACHER into a DP student (DPDFD or Private-kNN) with an ONNX export and a privacy card."""
    import shlex
    import sys

    import torch

    from .pipeline import ConvertOptions, convert as run_convert

    torch.set_num_threads(max(1, torch.get_num_threads()))
    lo = _load_options(arch, num_classes, in_chans, input_size, mean, std, weights, trust_pickle, device)
    opts = ConvertOptions(out=out, eps=None if noise_multiplier is not None else eps, delta=delta, noise_multiplier=noise_multiplier,
                          releases=steps, batch_size=batch_size, clip=clip, student=student, generator=generator, prior=prior,
                          distill_loss=distill_loss, student_epochs=epochs, seed=seed, device=lo.device, eval_data=eval_data,
                          command="dpconvert " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                          method=method, private_data=private_data, public_data=public_data, canaries=canaries,
                          save_generator=save_generator, query_generator=query_generator, generator_eps=generator_eps,
                          seeded_noise=seeded_noise, pixel_range=pixel_range, sign_key=str(sign_key) if sign_key else None,
                          pknn={"k": k, "sampling_rate": sampling_rate, "sigma1": sigma1, "threshold": threshold, "sigma2": sigma2,
                                "rounds": rounds, "queries": queries, "features": features, "labels": labels, "knn": knn, **({"student_epochs": epochs} if epochs else {})})
    reporter = _ProgressReporter(steps, console.err if as_json else console.out)  # `out` here is the --out path
    try:
        result = run_convert(teacher, opts, lo, on_plan=reporter.plan, on_progress=reporter.tick)
    finally:
        reporter.close()
    if as_json:
        print(result.card.to_json())
        return
    _print_summary(result)


class _ProgressReporter:
    """Rich progress bar on a TTY, one plain line per unit of work otherwise."""

    def __init__(self, releases: int, console=None) -> None:
        self.releases = releases
        self.console = console or out  # stderr under --json, so stdout carries the card only
        self.total = None
        self.progress = None
        self.task = None
        self.sigma = None
        self.delta = None

    def plan(self, plan: dict) -> None:
        from .cli_commands import print_plan
        from .console import is_tty

        print_plan(plan, self.console)
        if plan["method"] == "dpdfd":
            self.total = self.releases * (1 + plan["student_epochs"])
            self.sigma, self.delta = plan["sigma"], plan["delta"]
            label = "DPDFD"
        else:  # Private-kNN: a bar over vote passes (screening every query + argmax for answered ones; the rest is skipped)
            self.total = 2 * plan["queries_asked"]
            label = "Private-kNN votes"
        if is_tty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                                     TimeElapsedColumn(), console=self.console, transient=False)
            self.progress.start()
            self.task = self.progress.add_task("", total=self.total)

    def tick(self, info: dict) -> None:
        from .accounting import dpdfd

        if info["kind"] == "votes":
            if self.progress is not None:
                self.progress.update(self.task, advance=info["queries"])
            return
        if info["kind"] == "round":
            line = f"round {info['round']}: {info['answered']}/{info['asked']} queries answered, ε spent {info['epsilon']:.3f}, {info['seconds']:.0f} s"
            if self.progress is not None:  # unanswered queries need no argmax pass
                self.progress.update(self.task, advance=info["asked"] - info["answered"], description=line)
            else:
                self.console.print(line)
            return

        if info["kind"] == "query_generator":  # Private-kNN's in-run DPDFD generator, before the Private-kNN plan
            self.console.print(f"query generator (DPDFD, ε share {info['epsilon_share']:g} at δ/2): {info['stage']}, "
                               f"releases {info['releases']}" + (f", loss {info['loss']:.3g}" if "loss" in info else ""))
            return
        eps = dpdfd.epsilon(sigma=self.sigma, steps=info["releases"], delta=self.delta) if self.sigma else float("inf")
        parts = [f"releases {info['releases']}", f"ε spent {eps:.3f}"]
        if "loss" in info:
            parts.append(f"loss {info['loss']:.3g}")
        if info.get("agreement") is not None:
            parts.append(f"agreement (synthetic held-out) {info['agreement']:.3f}")
        text = "  ".join(parts)
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=text)
        else:
            self.console.print(f"{info['kind']}: {text}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _print_summary(result) -> None:
    from rich.table import Table

    d = result.card.data
    g = d["guarantee"]
    t = Table(title="dpconvert summary", show_header=False)
    rows = [
        ("student", f"{result.out}  ({d['model']['architecture']}, {d['model']['num_params']:,} parameters)"),
        ("privacy card", f"{result.card_json}, {result.card_md}"),
        ("ε, δ (scope)", f"{g['epsilon'] if isinstance(g['epsilon'], str) else round(g['epsilon'], 4)}, {g['delta']:g} ({g['scope']})"),
        ("record-level worst case ε", str(g["record_level_epsilon"] if isinstance(g["record_level_epsilon"], str) else round(g["record_level_epsilon"], 2))),
        ("ONNX parity", f"max |Δ| {d['export']['parity']['max_abs_diff']:.1e}, top-1 agreement {d['export']['parity']['top1_agreement']:.3f}"),
        ("time", f"{result.seconds:.1f} s"),
    ]
    u = d.get("utility")
    if u:
        rows.append(("accuracy (not DP-covered)", f"teacher {u['teacher_accuracy']:.4f}, student {u['student_accuracy']:.4f}, agreement {u['agreement']:.4f} on {u['evaluation_data']}"))
    c = (d.get("audit") or {}).get("canary")
    if c:
        rows.append(("canary audit (empirical)", f"ε lower bound {c['epsilon_lower_bound']:.3f} at {c['confidence']:.0%} "
                     f"({c['correct']}/{c['guesses']} correct guesses on {c['canaries']} canaries)"))
    for r in rows:
        t.add_row(*r)
    out.print(t)


# ------------------------------------------------------------------ audit
def _exit_usage(message: str) -> None:
    from .console import err

    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(2)


@app.command()
def audit(
    paths: Annotated[list[str], typer.Argument(help="Model files, *.card.json cards, or directories (zoos) scanned recursively.")],
    max_eps: Annotated[Optional[float], typer.Option("--max-eps", help="Fail models whose ε exceeds this.")] = None,
    max_delta: Annotated[Optional[float], typer.Option("--max-delta", help="Fail models whose δ exceeds this.")] = None,
    require_scope: Annotated[Optional[str], typer.Option("--require-scope", help="Require this scope: record or query.")] = None,
    max_record_eps: Annotated[Optional[float], typer.Option("--max-record-eps", help="Fail models whose record-level ε exceeds this.")] = None,
    min_accuracy: Annotated[Optional[float], typer.Option("--min-accuracy", help="Fail models whose card reports lower student accuracy.")] = None,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="Models without a card pass (reported as 'no DP guarantee').")] = False,
    allow_seeded_noise: Annotated[bool, typer.Option("--allow-seeded-noise", help="Let models whose DP noise was seeded (--seeded-noise: reproducible, not secret) pass; by default they fail.")] = False,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="A folder of *.pub Ed25519 keys (or one key): signatures by these keys are verified, others fail.")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature", help="Fail models whose card is not signed by a key in --trusted-keys.")] = False,
    require_secret_noise: Annotated[bool, typer.Option("--require-secret-noise", hidden=True, help="Kept for old CI configs: secret noise is now always required unless --allow-seeded-noise.")] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the full report as JSON to this file.")] = None,
    members: Annotated[Optional[str], typer.Option("--members", help="Membership inference: data the model was trained on (labelled).")] = None,
    non_members: Annotated[Optional[str], typer.Option("--non-members", help="Membership inference: data it was not trained on (labelled).")] = None,
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="Membership inference: also attack this teacher, side by side.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Membership inference: at most this many members and non-members.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Membership inference: write the ROC curves to this PNG.")] = None,
    reference_models: Annotated[int, typer.Option("--reference-models", help="Membership inference: train N cheap reference students on random halves of members ∪ non-members (LiRA with per-example calibration).")] = 0,
    reference_epochs: Annotated[int, typer.Option("--reference-epochs", help="Membership inference: epochs per reference student.")] = 3,
    write_card: Annotated[bool, typer.Option("--write-card", help="Membership inference: record the results in each model's card (audit block, labelled empirical).")] = False,
    arch: Arch = None,
    num_classes: NumClasses = None,
    input_size: InputSize = None,
    mean: Mean = None,
    std: Std = None,
) -> None:
    """Verify privacy cards, recompute ε and enforce a policy. Exit 0 = all pass, 1 = a failure, 2 = usage error.

    With --members/--non-members, also run membership-inference attacks (empirical evidence, not a guarantee)."""
    from .audit import Policy, audit as run_audit
    from .errors import DpconvertError

    try:
        policy = Policy(max_eps, max_delta, require_scope, max_record_eps, min_accuracy, allow_missing, allow_seeded_noise, require_signature,
                        str(trusted_keys) if trusted_keys else None)
        results = run_audit(paths, policy)
        if (members is None) != (non_members is None):
            raise DpconvertError("membership inference needs both --members and --non-members")
    except DpconvertError as e:
        _exit_usage(str(e))
    _print_audit(results)
    mia = {}
    if members is not None:
        try:
            mia = _membership(results, members, non_members, teacher, limit, plot, _load_options(arch, num_classes, None, input_size, mean, std, None, False),
                              reference_models, reference_epochs)
        except DpconvertError as e:
            _exit_usage(str(e))
        if write_card:
            from .membership import record_in_card

            for path, entry in mia.items():
                record_in_card(path, entry, members, non_members)
    if json_path is not None:
        report = {"policy": policy.to_dict(), "passed": all(r.passed for r in results), "models": [r.to_dict() for r in results]}
        if mia:
            report["membership_inference"] = mia
        from .atomic import AtomicOutputs

        with AtomicOutputs() as o:
            o.write(json_path, json.dumps(report, indent=2, default=str) + "\n")
    if not all(r.passed for r in results):
        raise typer.Exit(1)


def _membership(results, members, non_members, teacher, limit, plot, load_options, reference_models=0, reference_epochs=3) -> dict:
    from rich.table import Table

    from .membership import membership_audit, plot_roc

    report, curves = {}, {}
    t = Table(title="membership inference (empirical evidence, not a guarantee)")
    for col in ("model", "target", "attack", "AUC [95% CI]", "advantage", "TPR@0.1%FPR", "TPR@1%FPR"):
        t.add_column(col)
    for r in results:
        if r.path.endswith(".card.json"):
            continue
        res = membership_audit(r.path, members, non_members, teacher=teacher, load_options=load_options, limit=limit,
                               reference_models=reference_models, reference_epochs=reference_epochs,
                               on_progress=lambda i, n: out.print(f"reference model {i}/{n} trained"))
        report[r.path] = {target: {a.attack: a.to_dict() for a in attacks} for target, attacks in res.items()}
        for target, attacks in res.items():
            curves[f"{Path(r.path).name}:{target}"] = attacks
            for a in attacks:
                m, ci = a.metrics, a.ci95["auc"]
                t.add_row(Path(r.path).name, target, a.attack, f"{m['auc']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]", f"{m['advantage']:.3f}",
                          f"{m['tpr_at_0.1%_fpr']:.4f}", f"{m['tpr_at_1%_fpr']:.4f}")
    out.print(t)
    if plot is not None:
        plot_roc(curves, str(plot))
    return report


def _print_audit(results) -> None:
    from rich.table import Table

    t = Table(title=f"dpconvert audit: {sum(r.passed for r in results)}/{len(results)} pass")
    for col in ("model", "result", "ε (card / recomputed)", "δ", "scope", "record-level ε", "why"):
        t.add_column(col)
    for r in results:
        eps = "—" if r.epsilon is None else f"{r.epsilon:.4g} / {r.recomputed_epsilon:.4g}" if r.recomputed_epsilon is not None else f"{r.epsilon:.4g} / ?"
        t.add_row(r.path, "[green]pass[/]" if r.passed else "[red]FAIL[/]", eps, "—" if r.delta is None else f"{r.delta:g}",
                  r.scope or "—", "—" if r.record_level_epsilon is None else f"{r.record_level_epsilon:.4g}",
                  "; ".join(r.failures()) or next((c.detail for c in r.checks if c.name == "card present" and "allowed" in c.detail), ""))
    out.print(t)


# ------------------------------------------------------------------ card show|verify
card_app = typer.Typer(help="Show or verify one privacy card.", no_args_is_help=True)
app.add_typer(card_app, name="card")


@card_app.command("show")
def card_show(
    file: Annotated[Path, typer.Argument(help="A *.card.json or an ONNX model with an embedded card.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON instead of Markdown.")] = False,
) -> None:
    """Pretty-print a card."""
    from dpconvert.zoo_cards import PrivacyCard, extract_card, render_markdown
    from dpconvert.zoo_cards.onnx_meta import load_onnx

    from .errors import DpconvertError

    if file.suffix.lower() == ".onnx":
        if not file.exists():
            raise DpconvertError(f"{file}: no such file")
        card = extract_card(load_onnx(str(file)), file.name)
        if card is None:
            raise DpconvertError(f"{file}: no embedded privacy card; look for {file.name}.card.json")
    else:
        card = PrivacyCard.read(file)
    if as_json:
        print(card.to_json())
    else:
        from rich.markdown import Markdown

        out.print(Markdown(render_markdown(card).split("---\n", 2)[-1]))


@card_app.command("verify")
def card_verify(
    file: Annotated[Path, typer.Argument(help="A model file or its *.card.json.")],
    max_eps: Annotated[Optional[float], typer.Option("--max-eps", help="Fail if ε exceeds this.")] = None,
    require_scope: Annotated[Optional[str], typer.Option("--require-scope", help="Require this scope: record or query.")] = None,
    allow_seeded_noise: Annotated[bool, typer.Option("--allow-seeded-noise", help="Let a card with seeded (not secret) noise pass.")] = False,
    trusted_keys: Annotated[Optional[Path], typer.Option("--trusted-keys", help="A folder of *.pub keys whose signatures are accepted.")] = None,
    require_signature: Annotated[bool, typer.Option("--require-signature", help="Fail unless signed by a key in --trusted-keys.")] = False,
) -> None:
    """Run the audit checks on one model or card."""
    from .audit import Policy, audit_model, discover
    from .errors import DpconvertError

    try:
        (target,) = discover([str(file)])
        policy = Policy(max_eps=max_eps, require_scope=require_scope, allow_seeded_noise=allow_seeded_noise,
                        trusted_keys=str(trusted_keys) if trusted_keys else None, require_signature=require_signature)
        result = audit_model(target, policy)
    except DpconvertError as e:
        _exit_usage(str(e))
    _print_audit([result])
    for c in result.checks:
        out.print(f"{'ok ' if c.ok else 'FAIL'} {c.name}" + (f": {c.detail}" if c.detail else ""), markup=False)
    if not result.passed:
        raise typer.Exit(1)


@card_app.command("keygen")
def card_keygen(
    path: Annotated[Path, typer.Argument(help="Where to write the private key (mode 0600); the public key goes to PATH.pub.")],
) -> None:
    """Create an Ed25519 key pair for signing cards. Keep PATH secret (a CI secret); publish PATH.pub to auditors."""
    from dpconvert.zoo_cards.signing import generate_key

    priv, pub, kid = generate_key(path)
    out.print(f"private key {priv} (keep secret), public key {pub}, key id {kid}", markup=False)


@card_app.command("sign")
def card_sign(
    model: Annotated[Path, typer.Argument(help="An .onnx model written by dpconvert.")],
    key: Annotated[Path, typer.Option("--key", help="The Ed25519 private key (dpconvert card keygen).")],
) -> None:
    """Sign a model's card: the embedded copy, OUT.card.json and OUT.card.md are rewritten together."""
    from dpconvert.zoo_cards.signing import load_private_key, sign_model

    signed = sign_model(model, load_private_key(key))
    out.print(f"signed {model} with key {signed.data['signature']['key_id']}", markup=False)
