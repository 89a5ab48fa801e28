"""Render a card as Markdown, usable as a section of a Hugging Face model card."""

from __future__ import annotations

from .card import PrivacyCard


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):  # e.g. AdLM's corrections: numbered, in one table cell
        return " ".join(f"({i}) {_fmt(x)}" for i, x in enumerate(v, 1))
    return str(v)


def render_markdown(card: PrivacyCard) -> str:
    d = card.data
    g, a, m, mech = d["guarantee"], d["accounting"], d["model"], d["mechanism"]
    lines = [
        "---",
        "tags:",
        "- differential-privacy",
        f"- dp-{mech['method']}",
        "- dpconvert",
        "---",
        "",
        f"# Privacy card: {m['file']}",
        "",
        f"**(ε, δ) = ({_fmt(g['epsilon'])}, {_fmt(g['delta'])})**, scope **{g['scope']}**: {g['adjacency']}.",
        "",
        f"- Record-level worst case (add/remove one training record of the teacher): ε = {_fmt(g['record_level_epsilon'])}",
    ]
    if "per_image_epsilon" in g:
        lines.append(f"- All the answers about one public query image (public-image queries): ε = {_fmt(g['per_image_epsilon'])}")
    if "replace_one_epsilon" in g:
        lines.append(f"- Replace-one adjacency at the same scope: ε = {_fmt(g['replace_one_epsilon'])}")
    lines += ["- Covered: " + "; ".join(g["covers"]), "- Not covered: " + "; ".join(g["not_covered"]), "", "## Accounting", ""]
    lines.append(f"Accountant `{a['accountant']}`" + (f", calibrated to target ε = {_fmt(a.get('target_epsilon'))}" if a.get("calibrated") else "") + ".")
    lines += ["", "| bound | ε |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in a["epsilons"].items()]
    for k, v in (a.get("cross_check") or {}).items():
        lines.append(f"| cross-check: {k} | {_fmt(v)} |")
    lines += ["", "Libraries: " + ", ".join(f"{k} {v}" for k, v in a["libraries"].items()), "", "## Mechanism", "", "| parameter | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in mech.items() if not isinstance(v, dict)]
    lines += ["", "## Model", "", f"- file `{m['file']}`, sha256 `{m['sha256']}` ({m['sha256_method']})",
              f"- input {m['input_shape']}, mean {m.get('mean')}, std {m.get('std')}, {m['num_classes']} classes, {m.get('num_params')} parameters, architecture {m.get('architecture')}",
              f"- teacher: {d['teacher']['source']} ({d['teacher']['kind']}), sha256 {d['teacher'].get('sha256')}"]
    if d.get("export"):
        p = d["export"].get("parity", {})
        lines.append(f"- ONNX check: {d['export'].get('onnx_checker')}; onnxruntime vs torch on {p.get('inputs')} inputs: "
                     f"max |Δ| = {_fmt(p.get('max_abs_diff'))}, top-1 agreement {_fmt(p.get('top1_agreement'))}")
    u = d.get("utility")
    if u:
        lines += ["", "## Utility (not covered by the DP guarantee)" if not u.get("covered_by_guarantee") else "## Utility", ""]
        lines += [f"- {k}: {_fmt(v)}" for k, v in u.items() if k != "covered_by_guarantee"]
    if d.get("audit"):
        lines += ["", "## Empirical audit (evidence, not a guarantee)", ""]
        lines += [f"- {k}: {_fmt(v)}" for k, v in d["audit"].items() if not isinstance(v, dict)]
        for target, attacks in (d["audit"].get("results") or {}).items():
            for attack, m in attacks.items():
                lines.append(f"- {target}, {attack}: AUC {_fmt(m.get('auc'))}, advantage {_fmt(m.get('advantage'))}, "
                             f"TPR@0.1%FPR {_fmt(m.get('tpr_at_0.1%_fpr'))}, TPR@1%FPR {_fmt(m.get('tpr_at_1%_fpr'))}")
        c = d["audit"].get("canary")
        if c:
            lines.append(f"- canary audit ({c['canaries']} canaries, {c['correct']}/{c['guesses']} correct guesses): "
                         f"empirical ε lower bound {_fmt(c['epsilon_lower_bound'])} at {_fmt(c['confidence'])} confidence "
                         f"(the guarantee above is an upper bound; this must not exceed it)")
    if d["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in d["warnings"]]
    lines += ["", f"_Written by dpconvert {d['dpconvert_version']} on {d['created']}. Command: `{d.get('command', '')}`_", ""]
    return "\n".join(lines)
