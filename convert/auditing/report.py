"""`dpconvert audit ZOO --html report.html`: one self-contained page a person can read.

A sortable table of the models (ε, δ, scope, record-level ε, accuracy, checks, the policy result), the ε-vs-accuracy
scatter where the cards report utility, and the membership-inference operating points where an empirical audit
ran (TPR at 0.1 % and 1 % FPR from the card's ``audit`` block). The plots are matplotlib SVGs inlined in the page;
the sorting is a few lines of inline JavaScript; nothing is fetched.
"""

from __future__ import annotations

import html
import io
import math
from pathlib import Path
from typing import Optional

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee;cursor:pointer}tr.fail td{background:#fde8e8}
tr.pass td:nth-child(2){color:#176d2c;font-weight:bold}tr.fail td:nth-child(2){color:#a11;font-weight:bold}.plots{display:flex;gap:2em;flex-wrap:wrap}
td:nth-child(3),td:nth-child(4),td:nth-child(5){white-space:nowrap}.meta{color:#555;font-size:13px}"""
_SORT = """document.querySelectorAll('th').forEach((th,i)=>th.addEventListener('click',()=>{const tb=th.closest('table').tBodies[0];
const rows=[...tb.rows];const num=r=>{const v=parseFloat(r.cells[i].dataset.v??r.cells[i].textContent);return isNaN(v)?null:v};
const dir=th.dataset.dir=th.dataset.dir==='asc'?'desc':'asc';rows.sort((a,b)=>{const x=num(a),y=num(b);
const c=(x!==null&&y!==null)?x-y:a.cells[i].textContent.localeCompare(b.cells[i].textContent);return dir==='asc'?c:-c});
rows.forEach(r=>tb.appendChild(r))}));"""
COLUMNS = ("model", "result", "ε", "δ", "scope", "record-level ε", "accuracy", "why")


def _num(v, fmt: str = "{:.4g}") -> tuple[str, str]:
    """(shown text, sort key) of a number that may be missing or infinite."""
    if v is None:
        return "—", ""
    if isinstance(v, float) and math.isinf(v):
        return "∞", "1e308"
    return fmt.format(v), repr(float(v))


def _epsilon(r) -> tuple[str, str]:
    """The card's ε, and the replayed one beside it where they differ (as the console shows it)."""
    from dpconvert.zoo_cards.figures import eps_text

    eps = r.recomputed_epsilon if r.recomputed_epsilon is not None else r.epsilon
    if r.epsilon is None:
        return _num(eps)
    shown = eps_text(r.epsilon)
    if r.recomputed_epsilon is None or eps_text(r.recomputed_epsilon) != shown:
        shown += "≠" + ("?" if r.recomputed_epsilon is None else eps_text(r.recomputed_epsilon))
    return shown, _num(eps)[1]


def _record_level(r) -> tuple[str, str]:
    """The record-level ε in the card's own format, and in words where it protects nothing (a query-level card)."""
    from dpconvert.zoo_cards.figures import eps_text, meaningful

    if r.record_level_epsilon is None:
        return "—", ""
    shown, key = eps_text(r.record_level_epsilon), _num(r.record_level_epsilon)[1]
    return (shown if meaningful(r.record_level_epsilon) else f"{shown} (no meaningful protection of the teacher's records)"), key


def display_path(path: str, roots=()) -> str:
    """A model's path as people scan a zoo: relative to the audited folder it was found in (the folder named on the
    command line), else as given."""
    p = Path(path)
    for root in roots or ():
        r = Path(root)
        if r.is_dir():
            try:
                return str(p.resolve().relative_to(r.resolve()))
            except ValueError:
                continue
    return str(path)


def _row(r, roots=()) -> str:
    cells = [(display_path(r.path, roots), None), ("pass" if r.passed else "FAIL", None), _epsilon(r), _num(r.delta, "{:g}"), (r.scope or "—", None),
             _record_level(r), _num(r.accuracy, "{:.3f}"), ("; ".join(r.failures()), None)]
    tds = "".join(f'<td data-v="{html.escape(key)}">{html.escape(text)}</td>' if key is not None else f"<td>{html.escape(text)}</td>"
                  for text, key in cells)
    return f'<tr class="{"pass" if r.passed else "fail"}">{tds}</tr>'


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()[buf.getvalue().find("<svg"):]


def _scatter(results) -> str:
    pts = [(r.recomputed_epsilon if r.recomputed_epsilon is not None else r.epsilon, r.accuracy, r.passed, r.scope, r.path) for r in results]
    pts = [p for p in pts if p[0] is not None and p[1] is not None and math.isfinite(p[0])]
    if not pts:
        return "<p>No card in this zoo reports utility, so there is no ε–accuracy plot.</p>"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import LogLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for scope, marker in (("record", "o"), ("query", "s")):
        sel = [p for p in pts if p[3] == scope]
        if sel:
            ax.scatter([p[0] for p in sel], [p[1] for p in sel], marker=marker, c=["#176d2c" if p[2] else "#a11" for p in sel], label=f"scope {scope}")
    for eps, acc, _, _, path in pts:  # every point says which model it is
        ax.annotate(Path(path).stem, (eps, acc), xytext=(4, 3), textcoords="offset points", fontsize=7)
    ax.set(xlabel="ε (recomputed)", ylabel="accuracy (card, not DP-covered)", title="privacy vs utility", ylim=(0, 1.02))  # accuracy on its whole range: one point is not a 0.02-wide axis
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor tick labels overlapped the major ones
    ax.legend(fontsize=8)
    return _svg(fig)


def _membership(results) -> str:
    rows = [(r.path, t, a) for r in results for t, a in (r.membership or {}).items()]
    if not rows:
        return "<p>No card in this zoo carries an empirical membership-inference audit.</p>"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for path, target, a in rows:
        fpr = [1e-3, 1e-2, 1.0]
        tpr = [a["tpr_at_0.1%_fpr"], a["tpr_at_1%_fpr"], 1.0]
        ax.plot(fpr, tpr, marker="o", label=f"{path} ({target}, AUC {a['auc']:.3f})")
    ax.plot([1e-3, 1], [1e-3, 1], ls=":", c="grey")
    ax.set(xscale="log", yscale="log", xlabel="false positive rate", ylabel="true positive rate", title="membership inference (best attack)")
    ax.legend(fontsize=6)
    return _svg(fig)


def html_report(results, policy: dict, roots=()) -> str:
    """The page; ``roots``: the paths the audit was given (model paths are shown relative to an audited folder)."""
    passed = sum(r.passed for r in results)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "\n".join(_row(r, roots) for r in results)
    rules = ", ".join(f"{k} = {v}" for k, v in policy.items() if v not in (None, False)) or "no limits (card checks only)"
    import datetime

    from dpconvert.version import __version__

    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    audited = ", ".join(str(r) for r in roots) or "—"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dpconvert audit</title><style>{_STYLE}</style></head><body>"
            f"<h1>dpconvert audit: {passed}/{len(results)} pass</h1>"
            f"<p class='meta'>dpconvert {html.escape(__version__)}, {html.escape(when)}; audited: {html.escape(audited)}</p>"
            f"<p>Policy: {html.escape(rules)}. ε is recomputed from each card's "
            "accountant events; accuracy and membership inference are empirical, not part of any guarantee. Click a column to sort.</p>"
            f"<table id='models'><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"
            f"<div class='plots'><div>{_scatter(results)}</div><div>{_membership(results)}</div></div>"
            f"<script>{_SORT}</script></body></html>\n")


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


class AuditReport:
    """One audit: its results, the policy, any membership-inference results; writes the JSON report and the HTML page
    (all or nothing) and appends the Markdown table (a CI job summary)."""

    def __init__(self, results: list, policy, membership: Optional[dict] = None, roots=(), inversion: Optional[dict] = None) -> None:
        self.results, self.policy, self.membership, self.roots = results, policy, membership or {}, tuple(roots)
        self.inversion = inversion or {}

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def to_dict(self) -> dict:
        d = {"policy": self.policy.to_dict(), "passed": self.passed, "models": [r.to_dict() for r in self.results]}
        if self.membership:
            d["membership_inference"] = self.membership
        if self.inversion:
            d["model_inversion"] = self.inversion
        return d

    def markdown(self) -> str:
        return audit_markdown(self.results)

    def html(self) -> str:
        return html_report(self.results, self.policy.to_dict(), self.roots)

    def write(self, json_path=None, markdown_path=None, html_path=None) -> None:
        import json

        from dpconvert.io.atomic import AtomicOutputs

        with AtomicOutputs() as o:
            if json_path is not None:
                o.write(json_path, json.dumps(self.to_dict(), indent=2, default=str) + "\n")
            if html_path is not None:
                o.write(html_path, self.html())
        if markdown_path is not None:
            with open(markdown_path, "a", encoding="utf-8") as f:
                f.write(self.markdown())
