"""A Hugging Face model card (README.md with YAML front matter) rendered from a privacy card. No torch, no YAML library:
the front matter is written in JSON's flow syntax, which YAML reads as is."""

from __future__ import annotations

import json
from pathlib import Path

from .card import PrivacyCard
from .markdown import render_markdown


def _y(v) -> str:
    return json.dumps(v, ensure_ascii=False)


def render_hf_model_card(card: PrivacyCard, *, license: str = "other") -> str:
    d = card.data
    g, m, mech, u = d["guarantee"], d["model"], d["mechanism"], d.get("utility")
    name = Path(m["file"]).stem
    front = ["---", f"license: {_y(license)}", "library_name: onnx", "pipeline_tag: image-classification",
             "tags: " + _y(["differential-privacy", f"dp-{mech['method']}", f"dp-scope-{g['scope']}", "dpconvert", "onnx"])]
    if u:
        metric = {"type": "accuracy", "value": round(float(u["student_accuracy"]), 4),
                  "name": "student accuracy (computed outside the DP mechanism; not covered by the guarantee)"}
        front.append("model-index: " + _y([{"name": name, "results": [{
            "task": {"type": "image-classification"},
            "dataset": {"name": u["evaluation_data"], "type": "custom"},
            "metrics": [metric]}]}]))
    front.append("---")
    body = render_markdown(card).split("---\n", 2)[-1]  # drop its own front matter
    verify = ["", "## Verify this card", "", "```", f"pip install dpconvert && dpconvert audit {m['file']}", "```", "",
              "The audit recomputes every ε from the accountant events on this card and checks the model's sha256"
              + (f"; the card is signed by key `{d['signature']['key_id']}` (verify with `--trusted-keys`)." if d.get("signature") else ".")]
    machine = ["", "## Privacy card (machine-readable)", "", "`dpconvert audit` reads this copy when the model file has no embedded card and no",
               "sidecar `*.card.json` is present; where several copies exist they must agree.", "", HF_CARD_MARKER, "```json",
               card.to_json().rstrip(), "```"]
    return "\n".join(front) + "\n\n" + body.rstrip() + "\n" + "\n".join(verify) + "\n" + "\n".join(machine) + "\n"


HF_CARD_MARKER = "<!-- dpconvert privacy card -->"


def card_from_model_card(text: str, source: str) -> "PrivacyCard | None":
    """The card in a Hugging Face README written by ``render_hf_model_card`` (None when it has none)."""
    at = text.find(HF_CARD_MARKER)
    if at < 0:
        return None
    start = text.find("```json", at)
    end = text.find("```", start + 7) if start >= 0 else -1
    if start < 0 or end < 0:
        from dpconvert.errors import DpconvertError

        raise DpconvertError(f"{source}: the privacy-card block is not closed; the README is truncated")
    return PrivacyCard.from_json(text[start + 7:end], source)
