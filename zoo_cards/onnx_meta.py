"""Embed a card in / extract it from an ONNX model's ``metadata_props``.

The model hash is computed over ``ModelProto.graph`` serialised
deterministically, so embedding (or editing) metadata never changes it, while
any change to weights or graph does.
"""

from __future__ import annotations

import hashlib
from typing import Optional

from dpconvert.errors import DpconvertError

from .card import PrivacyCard

METADATA_KEY = "dpconvert.privacy_card"
SHA256_METHOD = "sha256 of onnx ModelProto.graph.SerializeToString(deterministic=True): weights and graph, metadata excluded"


def model_sha256(proto) -> str:
    return hashlib.sha256(proto.graph.SerializeToString(deterministic=True)).hexdigest()


def embed_card(proto, card: PrivacyCard) -> None:
    """Merge the card into ``metadata_props`` (``onnx.helper.set_model_props`` would replace all)."""
    props = {p.key: p.value for p in proto.metadata_props}
    props[METADATA_KEY] = card.to_json()
    del proto.metadata_props[:]
    for k, v in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v


def duplicate_metadata_keys(proto) -> list[str]:
    """Keys that occur more than once in ``metadata_props``. ONNX forbids them (``onnx.checker`` says so) and readers
    disagree on which copy counts (onnxruntime keeps the last), so a model with any is refused, never read."""
    seen, dup = set(), []
    for p in proto.metadata_props:
        if p.key in seen and p.key not in dup:
            dup.append(p.key)
        seen.add(p.key)
    return dup


def extract_card(proto, source: str = "model") -> Optional[PrivacyCard]:
    entries = [p.value for p in proto.metadata_props if p.key == METADATA_KEY]
    if len(entries) > 1:
        raise DpconvertError(f"{source}: the ONNX metadata holds {len(entries)} `{METADATA_KEY}` entries (ONNX allows one per key, and "
                             "tools disagree on which one they show); the model was tampered with", fix="export it again from its source", param=METADATA_KEY)
    return PrivacyCard.from_json(entries[0], f"{source} (embedded card)") if entries else None


def load_onnx(path: str):
    import onnx

    try:
        return onnx.load(path)
    except RecursionError:
        raise DpconvertError(f"{path}: not a readable ONNX model (nested too deeply)") from None
    except Exception as e:
        raise DpconvertError(f"{path}: not a readable ONNX model ({str(e).splitlines()[0][:160]})") from None


def write_model_with_card(path: str, proto, card: PrivacyCard, extra: dict | None = None) -> None:
    """Embed the card and write model, ``.card.json``, ``.card.md`` (and any ``extra`` path → bytes) all-or-nothing."""
    from dpconvert.io.atomic import AtomicOutputs

    from .card import card_paths
    from .markdown import render_markdown

    embed_card(proto, card)
    card_json, card_md = card_paths(path)
    with AtomicOutputs() as outputs:
        outputs.write(path, proto.SerializeToString())
        outputs.write(card_json, card.to_json())
        outputs.write(card_md, render_markdown(card))
        for extra_path, data in (extra or {}).items():
            outputs.write(extra_path, data)
