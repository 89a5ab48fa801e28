"""What the CLI prints: plan tables, progress, the summary, audit tables. Rich on a TTY, plain lines otherwise."""

from __future__ import annotations

from pathlib import Path

from .console import out


def print_plan(result: dict, to=None) -> None:
    from rich.table import Table

    to = to or out

    table = Table(title=f"privacy plan ({result['method']}, scope {result['scope']}, δ={result['delta']:g})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    if "rows" in result:  # a method that describes its own mechanism rows
        rows = list(result["rows"])
    elif result["method"] == "dpdfd":
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


class ProgressReporter:
    """Rich progress bar on a TTY, one plain line per unit of work otherwise."""

    def __init__(self, releases: int, console=None, show_time: bool = True) -> None:
        self.releases = releases
        self.show_time = show_time  # False when the run reads private data: its duration grows with the private set
        self.console = console or out  # stderr under --json, so stdout carries the card only
        self.total = None
        self.progress = None
        self.task = None

    def plan(self, plan: dict) -> None:
        from .console import is_tty

        print_plan(plan, self.console)
        if "progress" in plan:
            self.total, label = plan["progress"]["total"], plan["progress"]["label"]
            self.label = label
        elif plan["method"] == "dpdfd":
            self.total = self.releases * (1 + plan["student_epochs"])
            label = "DPDFD"
        else:  # Private-kNN: a bar over vote passes (screening every query + argmax for answered ones; the rest is skipped)
            self.total = 2 * plan["queries_asked"]
            label = "Private-kNN votes"
        if is_tty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = [TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}")]
            self.progress = Progress(*columns, *([TimeElapsedColumn()] if self.show_time else []), console=self.console, transient=False)
            self.progress.start()
            self.task = self.progress.add_task("", total=self.total)

    def tick(self, info: dict) -> None:
        if info["kind"] == "votes":
            if self.progress is not None:
                self.progress.update(self.task, advance=info["queries"])
            return
        if info["kind"] == "steps":
            if self.progress is not None:
                self.progress.update(self.task, advance=info["done"])
            elif info["step"] % max(1, info["steps"] // 10) < info["done"]:
                self.console.print(f"{getattr(self, 'label', 'steps')}: {info['step']}/{info['steps']}")
            return
        if info["kind"] == "round":
            line = f"round {info['round']}: {info['answered']}/{info['asked']} queries answered, ε spent {info['epsilon']:.3f}" + (
                f", {info['seconds']:.0f} s" if self.show_time else "")
            if self.progress is not None:  # unanswered queries need no argmax pass
                self.progress.update(self.task, advance=info["asked"] - info["answered"], description=line)
            else:
                self.console.print(line)
            return

        if info["kind"] == "estimate":
            self.console.print(f"estimated on this machine (timed on {info['probe']} queries): teacher forward {_duration(info['teacher_seconds'])}, "
                               f"student training {_duration(info['student_seconds'])}; released rows kept as {info['kept_as']} "
                               f"({info['kept_bytes'] / 2**20:,.0f} MiB). --batch-size and --epochs trade time for accuracy.")
            return
        if info["kind"] == "query_generator":  # Private-kNN's in-run generator (DPDFD or DP-critic GAN), before its plan
            count = f"step {info['releases']}/{info['total']}" if "total" in info else f"releases {info['releases']}"
            self.console.print(f"query generator (ε share {info['epsilon_share']:g} at δ/2): {info['stage']}, {count}"
                               + (f", loss {info['loss']:.3g}" if "loss" in info else ""))
            return
        parts = [f"releases {info['releases']}", f"ε spent {info.get('epsilon', float('inf')):.3f}"]
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


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"≈ {seconds:.0f} s"
    if seconds < 5400:
        return f"≈ {seconds / 60:.0f} min"
    return f"≈ {seconds / 3600:.1f} h"


TIMINGS_HIDDEN = ("hidden: this run read private data, and how long each phase took grows with the private set's size "
                  "(CI logs are often public); --show-timings shows them")


def print_summary(result, throughput: bool = False, show_timings: bool = False) -> None:
    from rich.table import Table

    d = result.card.data
    private = "timings" in (d.get("run") or {})  # the card's run block records no timing when private data was read
    g = d["guarantee"]
    t = Table(title="dpconvert summary", show_header=False)
    rows = [
        ("student", f"{result.out}  ({d['model']['architecture']}, {d['model']['num_params']:,} parameters)"),
        ("privacy card", f"{result.card_json}, {result.card_md}"),
        ("ε, δ (scope)", f"{g['epsilon'] if isinstance(g['epsilon'], str) else round(g['epsilon'], 4)}, {g['delta']:g} ({g['scope']})"),
        ("record-level worst case ε", str(g["record_level_epsilon"] if isinstance(g["record_level_epsilon"], str) else round(g["record_level_epsilon"], 2))),
        ("ONNX parity", f"max |Δ| {d['export']['parity']['max_abs_diff']:.1e}, top-1 agreement {d['export']['parity']['top1_agreement']:.3f}"),
    ]
    if private and not show_timings:
        rows.append(("time", TIMINGS_HIDDEN))
    else:
        rows += [("time", f"{result.seconds:.1f} s, peak memory {result.profile['peak_rss_mib']:,.0f} MiB"),
                 ("time per phase", ", ".join(f"{k} {v:.1f} s" for k, v in result.profile["phase_seconds"].items()))]
    if throughput and (show_timings or not private):
        rows.append(("throughput", ", ".join(f"{k} {v:,.0f}/s" for k, v in result.profile["items_per_second"].items())))
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


def print_audit(results) -> None:
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


def membership_table(results, members, non_members, teacher, limit, plot, load_options, reference_models=0, reference_epochs=3) -> dict:
    from rich.table import Table

    from dpconvert.auditing.membership import membership_audit, plot_roc

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


def audit_markdown(results) -> str:
    """The audit table as Markdown (a CI job summary). Paths and reasons come from files written by anyone: paths are
    code spans and reasons escaped prose, so no card can put HTML, links or table cells into the summary."""
    from dpconvert.zoo_cards.markdown import cell, code, text

    lines = [f"### dpconvert audit: {sum(r.passed for r in results)}/{len(results)} pass", "",
             "| model | result | ε (card / recomputed) | δ | scope | record-level ε | why |", "|---|---|---|---|---|---|---|"]
    for r in results:
        eps = "—" if r.epsilon is None else f"{r.epsilon:.4g} / " + (f"{r.recomputed_epsilon:.4g}" if r.recomputed_epsilon is not None else "?")
        lines.append("| " + " | ".join(cell(v) for v in (
            code(r.path), "✅ pass" if r.passed else "❌ FAIL", eps, "—" if r.delta is None else f"{r.delta:g}", text(r.scope or "—"),
            "—" if r.record_level_epsilon is None else f"{r.record_level_epsilon:.4g}", "; ".join(text(f) for f in r.failures()))) + " |")
    return "\n".join(lines) + "\n\n"
