"""What the CLI prints: plan tables, progress, the summary, audit tables. Rich on a TTY, plain lines otherwise."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from .console import out, set_live_console
from dpconvert.auditing.report import display_path

from .flags import as_flags


def print_plan(plan, to=None) -> None:
    """The plan table (``accounting/plans.py``): the mechanism's rows, then ε by each accountant and every guarantee
    figure that applies; notes below it."""
    from rich.table import Table

    from dpconvert.zoo_cards.figures import eps_text

    to = to or out

    table = Table(title=f"privacy plan ({plan.method}, scope {plan.scope}, δ={plan.delta:g})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = plan.mechanism_rows()
    for name, value in plan.accountants.items():
        rows.append((f"ε ({name})", eps_text(value)))
    rows.append(("ε reported", eps_text(plan.epsilon)))
    if plan.replace_one_epsilon is not None:
        rows.append(("ε, replace-one answer", eps_text(plan.replace_one_epsilon)))
    if plan.query_level_epsilon is not None:  # the headline is record-level: the per-answer bound beside it
        rows.append(("ε, query level (per answer)", eps_text(plan.query_level_epsilon)))
    elif plan.record_level_epsilon is not None:
        rows.append(("ε, record-level worst case", eps_text(plan.record_level_epsilon)))
    tr = plan.teacher_records  # the teacher carries a DP guarantee (its verified card)
    if tr:
        rows.append(("teacher's own ε (its card)", eps_text(tr["teacher_epsilon"])))
        if "run_epsilon" in tr:
            rows.append(("ε, teacher's records (teacher + run)", eps_text(tr["epsilon"])))
    for r in rows:
        table.add_row(*r)
    to.print(table)
    _plan_notes(plan, to)


def _plan_notes(plan, to) -> None:
    from dpconvert.zoo_cards.figures import eps_text, meaningful

    to.print(as_flags(f"adjacency: {plan.adjacency}"), markup=False)
    if plan.scope == "query" and plan.record_level_epsilon is not None and not meaningful(plan.record_level_epsilon):
        to.print(f"the teacher's individual training records get no meaningful protection (worst case ε = "
                 f"{eps_text(plan.record_level_epsilon)}): the guarantee is for the teacher's answers", markup=False)
    tr = plan.teacher_records
    if tr:
        to.print(as_flags(f"teacher's training records: (ε, δ) = ({tr['epsilon']:.4g}, {tr['delta']:.3g}); {tr['note']}"), markup=False)
    for note in plan.notes():
        to.print(note, markup=False)
    if plan.method_choice:
        to.print(as_flags(f"method {plan.method}: {plan.method_choice}"), markup=False)
    if plan.teacher_input:
        to.print(f"teacher input {plan.teacher_input}", markup=False)


PHASE_UNITS = {"queries": "rows", "teacher forward": "rows", "release": "rows", "student training": "samples", "parity": "inputs",
               "evaluation": "images", "DP-SGD": "steps", "generator training": "samples", "fixed features": "records"}


def _compact(n: float) -> str:
    """12 345 → 12.3k, 1 000 000 → 1M: counts that fit an 80-column progress line."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.3g}{suffix}"
    return f"{n:.0f}"


class ProgressReporter:
    """One progress bar per phase of the run (its name, a bar, a count with its unit, the time left), on a TTY; plain
    lines at 0/25/50/75/100 % of each phase otherwise. Methods report ``phase`` (name, total, unit) and ``advance``
    (done, status) events; older events (DP-SGD steps, Private-kNN votes and rounds) map onto the same bars.
    ``show_time``: False when the run reads private data (its durations grow with the private set)."""

    def __init__(self, console=None, show_time: bool = True) -> None:
        self.show_time = show_time
        self.console = console or out  # stderr under --json, so stdout carries the card only
        self.progress = None
        self.task = None
        self.phase_name, self.total, self.done, self.unit, self.printed = "", 0, 0, "", -1

    def plan(self, plan) -> None:
        from . import console

        if console.QUIET:
            return
        print_plan(plan, self.console)
        if plan.progress is not None:  # a method whose run is one bar says so in its plan
            self._start(plan.progress.label, plan.progress.total, plan.progress.unit)

    # ------------------------------------------------------------ one bar per phase
    def _start(self, name: str, total: int, unit: str) -> None:
        self._finish()
        self.phase_name, self.total, self.done, self.unit, self.printed = name, max(int(total), 1), 0, unit, -1
        from .console import is_tty

        if is_tty() and self.progress is None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
            from rich.table import Column

            columns = [TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=3, min_width=20)),
                       BarColumn(bar_width=None, table_column=Column(ratio=2, min_width=8)),
                       TextColumn("{task.fields[count]}", table_column=Column(no_wrap=True, min_width=12))]
            if self.show_time:
                columns.append(TimeRemainingColumn(compact=True, elapsed_when_finished=True))  # a finished bar: how long it took
            self.progress = Progress(*columns, console=self.console, transient=False, expand=True)
            self.progress.start()
            set_live_console(self.progress.console)  # log lines print above the bars, wrapped
        if self.progress is not None:
            self.task = self.progress.add_task(name, total=self.total, count=self._count())
        else:
            self._plain()

    def _count(self) -> str:
        if not self.unit:  # a phase without a count (its size would say how many private records there are)
            return "done" if self.done >= self.total else "…"
        return f"{_compact(self.done)}/{_compact(self.total)} {self.unit}"

    def _advance(self, n: int, status: str = "") -> None:
        if not self.phase_name:
            return
        self.done = min(self.total, self.done + n)
        if self.progress is not None:
            desc = f"{self.phase_name} · {status}" if status else None
            self.progress.update(self.task, completed=self.done, count=self._count(), **({"description": desc} if desc else {}))
        else:
            self._plain(status)

    def _plain(self, status: str = "") -> None:
        quarter = 4 * self.done // self.total
        if not self.unit and quarter < 4:  # an uncounted phase: its name when it starts, nothing more
            if self.printed < 0:
                self.printed = 0
                self.console.print(f"{self.phase_name} …", markup=False)
            return
        if quarter > self.printed or status:
            self.printed = quarter
            self.console.print(f"{self.phase_name}: {25 * quarter}% ({self._count()})" + (f", {status}" if status else ""), markup=False)

    def _finish(self) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=self.total)
        self.task = None

    def tick(self, info: dict) -> None:
        from . import console

        if console.QUIET:
            return
        kind = info["kind"]
        if kind == "phase":
            self._start(info["name"], info["total"], info["unit"])
        elif kind == "advance":
            self._advance(info["done"], info.get("status", ""))
        elif kind == "votes":
            self._advance(info["queries"])
        elif kind == "steps":
            self._advance(info["done"])
        elif kind == "round":  # unanswered queries need no argmax pass
            line = f"round {info['round']}: {info['answered']}/{info['asked']} answered, ε spent {info['epsilon']:.3f}" + (
                f", {info['seconds']:.0f} s" if self.show_time else "")
            self._advance(info["asked"] - info["answered"], line)
        elif kind == "estimate" and "steps_seconds" in info:  # DP-SGD: timed on a synthetic lot of the noisy expected size
            self._print(f"estimated on this machine (timed on synthetic records): fixed features and DP-SGD steps "
                        f"{_duration(info['steps_seconds'])}")
        elif kind == "estimate":
            total = info.get("queries_seconds", 0.0) + info["teacher_seconds"] + info["student_seconds"]
            self._print(f"estimated on this machine (timed on {info['probe']} queries): queries {_duration(info.get('queries_seconds', 0.0))}, "
                        f"teacher {_duration(info['teacher_seconds'])}, student {_duration(info['student_seconds'])}, in all {_duration(total)}; "
                        "--batch-size and --epochs trade time for accuracy")
        elif kind == "query_generator":  # Private-kNN's in-run DP-critic GAN, before its plan
            self._print(f"query generator (ε {info['epsilon_share']:g} at δ {info['delta']:g}): {info['stage']}, step {info['releases']}/{info['total']}")

    def _print(self, text: str) -> None:
        (self.progress.console if self.progress is not None else self.console).print(text, markup=False)

    def close(self) -> None:
        self._finish()
        if self.progress is not None:
            self.progress.stop()
            set_live_console(None)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"≈ {seconds:.0f} s"
    if seconds < 5400:
        return f"≈ {seconds / 60:.0f} min"
    return f"≈ {seconds / 3600:.1f} h"


TIMINGS_HIDDEN = ("hidden: this run read private data, and how long each phase took grows with the private set's size "
                  "(CI logs are often public); --show-timings shows them")


def print_synth_summary(card, out_path, samples: int, grid=None) -> None:
    """What `dpconvert synth` wrote and what its guarantee means, as the conversion's summary does."""
    from rich.table import Table

    from dpconvert.zoo_cards.figures import eps_text, scope_sentences

    g = card.data["guarantee"]
    t = Table(title="dpconvert synth summary", show_header=False)
    t.add_column(no_wrap=True)
    t.add_column(overflow="fold")
    rows = [("data set", f"{out_path}  ({samples:,} samples, {card.data['data']['num_classes']} classes)"), ("data card", f"{out_path}.card.json"),
            ("ε, δ (scope)", f"{eps_text(g['epsilon'])}, {g['delta']:g} ({g['scope']})"),
            ("what it means", scope_sentences(g, "this data set")[0])]
    if grid:
        rows.append(("sample grid", str(grid)))
    if "empirical" in card.data:  # never an ε: the estimate is evidence about this data set, and the card says so
        e = card.data["empirical"]
        rows.append(("ex-post estimate (empirical, not DP)", f"μ = {e['expected_privacy_loss_bound']:.3g}, exceeded with probability "
                     f"≤ {e['exceed_probability']:g} over {e['removals']} simulated removals"))
    for r in rows:
        t.add_row(*r)
    out.print(t)


def print_summary(result, throughput: bool = False, show_timings: bool = False) -> None:
    from rich.table import Table

    from dpconvert.zoo_cards.figures import eps_text, scope_sentences

    d = result.card.data
    private = "timings" in (d.get("run") or {})  # the card's run block records no timing when private data was read
    g = d["guarantee"]
    t = Table(title="dpconvert summary", show_header=False)
    rows = [
        ("student", f"{result.out}  ({d['model']['architecture']}, {d['model']['num_params']:,} parameters)"),
        ("privacy card", f"{result.card_json}, {result.card_md}"),
        ("ε, δ (scope)", f"{eps_text(g['epsilon'])}, {g['delta']:g} ({g['scope']})"),
        ("record-level worst case ε", eps_text(g["record_level_epsilon"]))
        if "query_level_epsilon" not in g else ("query-level ε (per answer)", eps_text(g["query_level_epsilon"])),
        *([("queries' record-level ε (DP-critic GAN)", eps_text(g["queries_record_level_epsilon"]))]
          if "queries_record_level_epsilon" in g else []),
        ("what it means", " ".join(scope_sentences(g)[1:]) or scope_sentences(g)[0]),
        ("ONNX parity", f"max |Δ| {d['export']['parity']['max_abs_diff']:.1e}, top-1 agreement {d['export']['parity']['top1_agreement']:.3f}"),
    ]
    if private and not show_timings:
        rows.append(("time", TIMINGS_HIDDEN))
    else:
        rows += [("time", f"{result.seconds:.1f} s, peak memory {result.profile['peak_rss_mib']:,.0f} MiB"),
                 ("time per phase", ", ".join(f"{k} {v:.1f} s" for k, v in result.profile["phase_seconds"].items()))]
    if throughput and (show_timings or not private):
        rows.append(("throughput", ", ".join(f"{k} {_compact(v)} {PHASE_UNITS.get(k, 'items')}/s"
                                             for k, v in result.profile["items_per_second"].items())))
    v = d.get("expected_utility")
    if v:
        rows.append(("verdict", as_flags(v["note"])))
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


def _cut_left(text: str, width: int) -> str:
    """Paths differ at their ends (the file name): cut what does not fit from the left."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


WIDE_AUDIT = 120  # columns from which the reasons fit in the table; narrower, they are listed under it in full


def unique_names(paths: list[str]) -> list[str]:
    """Each path by its shortest tail of components that no other path ends with (two zoo entries named model.onnx
    read as a/model.onnx and b/model.onnx)."""
    parts = [Path(p).parts for p in paths]
    out = []
    for i, ps in enumerate(parts):
        k = 1
        while k < len(ps) and any(j != i and qs[-k:] == ps[-k:] for j, qs in enumerate(parts)):
            k += 1
        out.append(str(Path(*ps[-k:])))
    return out


def print_audit(results, roots=()) -> None:
    from rich.table import Table

    from dpconvert.zoo_cards.figures import eps_text

    width = out.width or 80
    wide = width >= WIDE_AUDIT
    t = Table(title=f"dpconvert audit: {sum(r.passed for r in results)}/{len(results)} pass")
    names = unique_names([display_path(r.path, roots) for r in results])
    name_width = max(16, width // 4)
    t.add_column("model", no_wrap=True, max_width=name_width)
    t.add_column("result", no_wrap=True)
    t.add_column("ε card / replayed" if wide else "ε", no_wrap=True)
    t.add_column("δ", no_wrap=True)
    t.add_column("scope", no_wrap=True)
    t.add_column("record-level ε" if wide else "record ε", no_wrap=True)
    if wide:
        t.add_column("why", overflow="fold", ratio=1)
    reasons = []
    for r, name in zip(results, names):
        replayed = "?" if r.recomputed_epsilon is None else eps_text(r.recomputed_epsilon)
        eps = "—" if r.epsilon is None else f"{eps_text(r.epsilon)} / {replayed}" if wide else \
            eps_text(r.epsilon) if replayed == eps_text(r.epsilon) else f"{eps_text(r.epsilon)}≠{replayed}"
        why = as_flags("; ".join(r.failures()) or next((c.detail for c in r.checks if c.name == "card present" and "allowed" in c.detail), ""))
        row = [_cut_left(name, name_width), "[green]pass[/]" if r.passed else "[red]FAIL[/]", eps, "—" if r.delta is None else f"{r.delta:g}",
               r.scope or "—", "—" if r.record_level_epsilon is None else eps_text(r.record_level_epsilon)]
        t.add_row(*row, *([Text(why)] if wide else []))
        if why and not wide:
            reasons.append((name, r.failures() or [why]))
    out.print(t)
    for name, failures in reasons:  # in full, one reason a line, wrapped at the terminal's width
        out.print(f"{name}:", markup=False, style="bold", soft_wrap=False)
        for f in failures:
            out.print(Text(f"  - {as_flags(f)}"), soft_wrap=False)


def membership_table(report: dict) -> None:
    """The membership-inference results (``auditing.membership.membership_audits``) as a table."""
    from rich.table import Table

    t = Table(title="membership inference (empirical evidence, not a guarantee)")
    for col in ("model", "target", "attack", "AUC [95% CI]", "advantage", "TPR@0.1%FPR", "TPR@1%FPR"):
        t.add_column(col)
    for path, targets in report.items():
        for target, attacks in targets.items():
            for name, a in attacks.items():
                m, ci = a, a["ci95"]["auc"]
                t.add_row(Path(path).name, target, name, f"{m['auc']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]", f"{m['advantage']:.3f}",
                          f"{m['tpr_at_0.1%_fpr']:.4f}", f"{m['tpr_at_1%_fpr']:.4f}")
    out.print(t)


def inversion_table(report: dict) -> None:
    """The model-inversion results (``auditing.inversion.inversion_audit``) as a table."""
    from rich.table import Table

    t = Table(title="model inversion (empirical evidence, not a guarantee): ratio < 1 = closer to a private record than records are to each other")
    for col in ("model", "target", "class confidence", "nearest record (RMS)", "records' own NN (RMS)", "ratio"):
        t.add_column(col)
    for path, targets in report.items():
        for target, r in targets.items():
            t.add_row(Path(path).name, target, f"{r['confidence']:.3f}", f"{r['nearest_distance']:.3f}", f"{r['baseline']:.3f}", f"{r['ratio']:.2f}")
    out.print(t)
