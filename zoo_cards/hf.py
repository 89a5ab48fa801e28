"""A Hugging Face model card (README.md with YAML front matter) rendered from a privacy card. No torch, no YAML library:
the front matter is written in JSON's flow syntax, which YAML reads as is.

The README is a copy of the card that people and the Hub read (its headline, its tags, its ``model-index``), so it is
never edited by hand: ``dpconvert audit`` re-renders it from the checked JSON block inside it and fails a README that
differs in any byte (``readme_problem``). The license is the one part the publisher picks at export; it is a short
SPDX-like identifier, read back from the front matter for the re-rendering.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from dpconvert.errors import DpconvertError

from .figures import dp_tags
from .card import PrivacyCard
from .markdown import _tag, code, render_markdown

HF_CARD_MARKER = "<!-- dpconvert privacy card -->"
LICENSE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]{0,63}$")
_LICENSE_LINE = re.compile(r'^license: ("[^"\n]*")$', re.MULTILINE)


def _y(v) -> str:
    return json.dumps(v, ensure_ascii=False)


def check_license(license: str) -> str:
    if not isinstance(license, str) or not LICENSE.match(license):
        raise DpconvertError(fix=f"`license` must be a license identifier such as apache-2.0, mit or other, got {license!r}", param="license")
    return license


def render_hf_model_card(card: PrivacyCard, *, license: str = "other") -> str:
    check_license(license)
    d = card.data
    g, m, mech, u = d["guarantee"], d["model"], d["mechanism"], d.get("utility")
    name = Path(m["file"]).stem
    front = ["---", f"license: {_y(license)}", "library_name: onnx", "pipeline_tag: image-classification",
             "tags: " + _y([*dp_tags(d), f"dp-{_tag(mech['method'])}", f"dp-scope-{_tag(g['scope'])}", "dpconvert", "onnx"])]
    if u:
        metric = {"type": "accuracy", "value": round(float(u["student_accuracy"]), 4),
                  "name": "student accuracy (computed outside the DP mechanism; not covered by the guarantee)"}
        front.append("model-index: " + _y([{"name": name, "results": [{
            "task": {"type": "image-classification"},
            "dataset": {"name": u["evaluation_data"], "type": "custom"},
            "metrics": [metric]}]}]))
    front.append("---")
    body = render_markdown(card).split("---\n", 2)[-1]  # drop its own front matter
    verify = ["", "## Verify this card", "", "```", f"pip install dpconvert && dpconvert audit {json.dumps(m['file'])}", "```", "",
              "The audit recomputes every ε from the accountant events on this card, checks the model's sha256 and that this README is "
              "exactly the one rendered from the card below"
              + (f"; the card is signed by key {code(d['signature']['key_id'])} (verify with ``trusted_keys``)." if d.get("signature") else ".")]
    machine = ["", "## Privacy card (machine-readable)", "", "`dpconvert audit` reads this copy when the model file has no embedded card and no",
               "sidecar `*.card.json` is present; where several copies exist they must agree.", "", HF_CARD_MARKER, "```json",
               card.to_json().rstrip(), "```"]
    return "\n".join(front) + "\n\n" + body.rstrip() + "\n" + "\n".join(verify) + "\n" + "\n".join(machine) + "\n"


def card_from_model_card(text: str, source: str) -> "PrivacyCard | None":
    """The card in a Hugging Face README written by ``render_hf_model_card`` (None when it has none)."""
    at = text.find(HF_CARD_MARKER)
    if at < 0:
        return None
    if text.find(HF_CARD_MARKER, at + 1) >= 0:
        raise DpconvertError(f"{source}: the README holds more than one privacy-card block", fix="write it again with `dpconvert card export`")
    start = text.find("```json", at)
    end = text.find("```", start + 7) if start >= 0 else -1
    if start < 0 or end < 0:
        raise DpconvertError(f"{source}: the privacy-card block is not closed; the README is truncated")
    return PrivacyCard.from_json(text[start + 7:end], source)


def readme_problem(text: str, card: PrivacyCard) -> Optional[str]:
    """None when ``text`` is exactly the README ``render_hf_model_card`` writes for ``card``; else what differs."""
    found = _LICENSE_LINE.search(text)
    license = json.loads(found.group(1)) if found else None
    if license is None or not LICENSE.match(license):
        return "its front matter has no valid `license` line; write it again with `dpconvert card export`"
    expected = render_hf_model_card(card, license=license)
    if text == expected:
        return None
    line = next((i for i, (a, b) in enumerate(zip(text.splitlines(), expected.splitlines()), 1) if a != b),
                min(len(text.splitlines()), len(expected.splitlines())) + 1)
    return f"line {line} differs from the README rendered from its card (edited after `dpconvert card export`)"


def claims_dpconvert(text: str) -> bool:
    """A README whose front matter carries dpconvert's tags claims a card, whether or not it holds one."""
    if not text.startswith("---"):
        return False
    end = text.find("\n---", 3)
    front = text[3:end if end > 0 else len(text)]
    return "dpconvert" in front or "differential-privacy" in front or "dp-query-level" in front
