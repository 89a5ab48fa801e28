"""How a card's figures read to a person: one number format everywhere (plan, summary, card, audit, report), and one
plain sentence for each scope a card states. No torch.

The sentences are derived from the guarantee block alone, so every copy of a card says the same thing about it.
"""

from __future__ import annotations

import math

# Above this, an ε protects nothing a reader would call protection: e^10 ≈ 22 000 as the bound on the likelihood ratio.
MEANINGFUL_EPSILON = 10.0
DOCS = "docs/privacy.md, \"Scopes and adjacency\" (in dpconvert's source)"


def eps_text(v) -> str:
    """ε as people read it: 4 significant digits below 1 000, whole numbers with thousands separators above (38,843,
    never 3.884e+04 in one place and 38843.0140 in another), ∞ for no noise."""
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "∞"
    v = float(v)
    return f"{v:.4g}" if v < 1000 else f"{v:,.0f}"


def delta_text(v) -> str:
    return f"{float(v):.3g}"


def meaningful(v) -> bool:
    return v != "inf" and float(v) <= MEANINGFUL_EPSILON


def scope_sentences(g: dict, release: str = "this student") -> list[str]:
    """One sentence per scope the guarantee block states, in the words a reviewer needs (``release``: what is
    published, "this student" or "this data set")."""
    eps, delta = eps_text(g["epsilon"]), delta_text(g["delta"])
    if g["scope"] == "query":
        out = [f"Query level, the headline (ε, δ) = ({eps}, {delta}): one answer of the teacher changes what anyone can learn "
               f"from {release} by at most this much. It protects the teacher's answers, not the people in its training data."]
    else:
        out = [f"Record level, the headline (ε, δ) = ({eps}, {delta}): adding or removing one record of the private training data "
               f"changes what anyone can learn from {release} by at most this much."]
    if "queries_record_level_epsilon" in g:
        out.append(f"The private records the DP-critic GAN was trained on (the queries): ε = {eps_text(g['queries_record_level_epsilon'])}.")
    if g["scope"] == "query" and "record_level_epsilon" in g:
        rec = g["record_level_epsilon"]
        if meaningful(rec):
            out.append(f"The teacher's individual training records: ε = {eps_text(rec)} in the worst case (one record may change every "
                       "answer of a non-private teacher).")
        else:
            out.append(f"The teacher's individual training records have no meaningful protection from this student: their worst-case "
                       f"ε is {eps_text(rec)} (one record may change every answer of a non-private teacher), so only the query-level "
                       f"guarantee above holds. Why: {DOCS}.")
    if "query_level_epsilon" in g:
        out.append(f"One answer of the teachers (per answer): ε = {eps_text(g['query_level_epsilon'])}.")
    return out


def dp_tags(data: dict) -> list[str]:
    """Model-hub tags: "differential-privacy" only where the headline protects the records at a meaningful ε; a
    query-level card (the teacher's answers, not its training records) is tagged for what it is. Schema-1.0 cards
    keep the tags their release wrote (their README is compared byte for byte)."""
    g = data["guarantee"]
    if data.get("schema_version") == "1.0" or (g["scope"] == "record" and meaningful(g["epsilon"])):
        return ["differential-privacy"]
    return ["dp-query-level"] if g["scope"] == "query" else ["dp-weak-guarantee"]
