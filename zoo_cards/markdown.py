"""Render a card as Markdown, usable as a section of a Hugging Face model card.

Every string that comes from the card is escaped (``text``) or put in a code span (``code``): a card is input
written by someone else, and its text must not become HTML, a link, an image or table structure in a page people
read. The audit re-renders this file from the checked card and compares, so the rendering must be deterministic.
"""

from __future__ import annotations

import re

from .card import PrivacyCard

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#!])")


def text(v) -> str:
    """Card text as inert Markdown prose: one line, Markdown punctuation backslash-escaped, ``&`` as an entity, and
    URL schemes broken so that no renderer turns them into links."""
    s = " ".join(str(v).split()).replace("&", "&amp;")
    s = _SPECIAL.sub(r"\\\1", s)
    return s.replace("://", "\\:\\/\\/").replace("www.", "www\\.")


def code(v) -> str:
    """Card text as an inline code span (rendered literally: no HTML, links or emphasis), on one line."""
    s = " ".join(str(v).split())
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def cell(v) -> str:
    """A table cell: GFM splits cells on ``|`` even inside code spans, so pipes are escaped after everything else."""
    return v.replace("|", "\\|") if "|" in v else v


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):  # e.g. AdLM's corrections: numbered, in one table cell
        return " ".join(f"({i}) {_fmt(x)}" for i, x in enumerate(v, 1))
    return text(v)


def _seq(v) -> str:
    return "[" + ", ".join(_fmt(x) for x in v) + "]" if isinstance(v, list) else _fmt(v)


def _guarantee_lines(d: dict) -> list[str]:
    from .figures import eps_text, scope_sentences

    g, a = d["guarantee"], d["accounting"]
    lines = [
        f"**(ε, δ) = ({eps_text(g['epsilon'])}, {_fmt(g['delta'])})**, scope **{text(g['scope'])}**: {text(g['adjacency'])}.",
        "",
        *(f"- {text(s)}" for s in scope_sentences(g, "this data set" if "data" in d and "model" not in d else "this student")),
        "",
    ]
    if "query_level_epsilon" in g:  # several teachers on disjoint partitions: the headline is record-level
        lines.append(f"- Query level, per answer (add/remove one answer of the teachers): ε = {eps_text(g['query_level_epsilon'])}")
    elif g["scope"] == "query":  # a record-level headline is its own worst case
        lines.append(f"- Record-level worst case (add/remove one training record of the teacher): ε = {eps_text(g['record_level_epsilon'])}")
    if "queries_record_level_epsilon" in g:  # DPDFD on DP-critic GAN samples: the second scope
        lines.append(f"- The queries' record level (add/remove one private record the DP-critic GAN was trained on; the queries and the "
                     f"GAN are post-processing of its critic): ε = {eps_text(g['queries_record_level_epsilon'])}")
    if "per_image_epsilon" in g:
        lines.append(f"- All the answers about one public query image (public-image queries): ε = {eps_text(g['per_image_epsilon'])}")
    if "replace_one_epsilon" in g:
        lines.append(f"- Replace-one adjacency at the same scope: ε = {eps_text(g['replace_one_epsilon'])}" if "query_level_epsilon" not in g
                     else f"- One answer of the teachers replaced (instead of added/removed): ε = {eps_text(g['replace_one_epsilon'])}")
    lines += ["- Covered: " + "; ".join(text(c) for c in g["covers"]), "- Not covered: " + "; ".join(text(c) for c in g["not_covered"]),
              "", "## Accounting", ""]
    lines.append(f"Accountant {code(a['accountant'])}" + (f", calibrated to target ε = {_fmt(a.get('target_epsilon'))}" if a.get("calibrated") else "") + ".")
    lines += ["", "| bound | ε |", "|---|---|"]
    lines += [f"| {cell(code(k))} | {_fmt(v)} |" for k, v in a["epsilons"].items()]
    for k, v in (a.get("cross_check") or {}).items():
        lines.append(f"| cross-check: {cell(code(k))} | {_fmt(v)} |")
    lines += ["", "Libraries: " + ", ".join(f"{text(k)} {text(v)}" for k, v in a["libraries"].items()), "", "## Mechanism", "",
              "| parameter | value |", "|---|---|"]
    lines += [f"| {cell(code(k))} | {cell(_fmt(v))} |" for k, v in d["mechanism"].items() if not isinstance(v, dict)]
    return lines


def _tail(d: dict) -> list[str]:
    lines = []
    if d["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {text(w)}" for w in d["warnings"]]
    lines += ["", f"_Written by dpconvert {text(d['dpconvert_version'])} on {text(d['created'])}._ Command: {code(d.get('command') or '')}", ""]
    return lines


def _teacher_guarantee_line(tg: dict) -> str:
    """The inherited guarantee in words: the teacher's own (ε, δ), and the composition with this run's where it read
    private records itself (schema 1.0 cards carried the teacher's alone)."""
    own = (f"- the teacher was trained with DP: record-level (ε, δ) = ({_fmt(tg.get('teacher_epsilon', tg['epsilon']))}, "
           f"{_fmt(tg.get('teacher_delta', tg['delta']))}) from its verified card (on this card as `teacher.guarantee`)")
    if "run_epsilon" in tg:
        return (own + f"; this run also read private records itself, which may be the teacher's, so for the teacher's training records "
                f"(ε, δ) = ({_fmt(tg['epsilon'])}, {_fmt(tg['delta'])}): the teacher's ({_fmt(tg['teacher_epsilon'])}) plus this run's "
                f"record-level ({_fmt(tg['run_epsilon'])}), δ likewise")
    if tg.get("private_data_is_not_teacher_data"):
        return (own + "; this run also read private records, which its user states are not the teacher's training data (the user's "
                "statement, not checked): the teacher's training records keep the teacher's guarantee")
    return own + "; the student depends on the teacher's training records only through the teacher, so that guarantee holds for it too"


def render_markdown(card: PrivacyCard) -> str:
    if card.data.get("schema_version") == "1.0":  # as the release that wrote it rendered it (the audit compares bytes)
        from . import markdown_1_0

        return markdown_1_0.render_markdown(card)
    if card.kind == "data":
        return render_data_markdown(card)
    d = card.data
    m = d["model"]
    from .figures import dp_tags

    lines = ["---", "tags:", *(f"- {t}" for t in dp_tags(d)), f"- dp-{_tag(d['mechanism']['method'])}", "- dpconvert", "---", "",
             f"# Privacy card: {code(m['file'])}", ""]
    lines += _guarantee_lines(d)
    lines += ["", "## Model", "", f"- file {code(m['file'])}, sha256 {code(m['sha256'])} ({text(m['sha256_method'])})",
              f"- input {_seq(m['input_shape'])}, mean {_seq(m.get('mean'))}, std {_seq(m.get('std'))}, {_fmt(m['num_classes'])} classes, "
              f"{_fmt(m.get('num_params'))} parameters, architecture {code(m.get('architecture'))}",
              f"- teacher: {code(d['teacher']['source'])} ({text(d['teacher']['kind'])}), sha256 {code(d['teacher'].get('sha256'))}"]
    tg = d["teacher"].get("guarantee")
    if tg:
        lines.append(_teacher_guarantee_line(tg))
    if d.get("export"):
        p = d["export"].get("parity", {})
        lines.append(f"- ONNX check: {text(d['export'].get('onnx_checker'))}; onnxruntime vs torch on {_fmt(p.get('inputs'))} inputs: "
                     f"max |Δ| = {_fmt(p.get('max_abs_diff'))}, top-1 agreement {_fmt(p.get('top1_agreement'))}")
    v = d.get("expected_utility")
    if v:
        lines += ["", "## Expected utility (from the release, before evaluation)", "", f"- {text(v['note'])}",
                  f"- each target the student learned from averages {_fmt(v['answers_per_target'])} released answers: noise-to-signal "
                  f"power ≥ {_fmt(v['target_noise_to_signal'])}"]
    u = d.get("utility")
    if u:
        lines += ["", "## Utility (not covered by the DP guarantee)" if not u.get("covered_by_guarantee") else "## Utility", ""]
        lines += [f"- {text(k)}: {_fmt(v)}" for k, v in u.items() if k != "covered_by_guarantee"]
    if d.get("audit"):
        lines += ["", "## Empirical audit (evidence, not a guarantee)", ""]
        lines += [f"- {text(k)}: {_fmt(v)}" for k, v in d["audit"].items() if not isinstance(v, dict)]
        for target, attacks in (d["audit"].get("results") or {}).items():
            for attack, r in attacks.items():
                lines.append(f"- {text(target)}, {text(attack)}: AUC {_fmt(r.get('auc'))}, advantage {_fmt(r.get('advantage'))}, "
                             f"TPR@0.1%FPR {_fmt(r.get('tpr_at_0.1%_fpr'))}, TPR@1%FPR {_fmt(r.get('tpr_at_1%_fpr'))}")
        c = d["audit"].get("canary")
        if c:
            lines.append(f"- canary audit ({_fmt(c['canaries'])} canaries, {_fmt(c['correct'])}/{_fmt(c['guesses'])} correct guesses): "
                         f"empirical ε lower bound {_fmt(c['epsilon_lower_bound'])} at {_fmt(c['confidence'])} confidence "
                         f"(the guarantee above is an upper bound; this must not exceed it)")
    return "\n".join(lines + _tail(d))


def render_data_markdown(card: PrivacyCard) -> str:
    """A synthetic data set's card (``dpconvert synth``) for people."""
    d = card.data
    x = d["data"]
    lines = [f"# Privacy card: {code(x['file'])} (synthetic data set)", ""] + _guarantee_lines(d)
    lines += ["", "## Data", "", f"- file {code(x['file'])}, sha256 {code(x['sha256'])}",
              f"- {_fmt(x['samples'])} samples of shape {_seq(x['shape'])}, {_fmt(x['num_classes'])} classes; pixels {text(x.get('pixels', ''))}; "
              f"labels {text(x.get('labels', ''))}"]
    return "\n".join(lines + _tail(d))


def _tag(v) -> str:
    """A front-matter tag: lower-case letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", str(v).lower()).strip("-") or "unknown"
