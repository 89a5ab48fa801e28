"""The privacy card: schema, read/write, Markdown, ONNX embedding. Imports no torch."""

from .card import CARD_SUFFIX_JSON, CARD_SUFFIX_MD, SCHEMA_VERSION, PrivacyCard, card_paths
from .markdown import render_markdown
from .onnx_meta import METADATA_KEY, embed_card, extract_card, model_sha256

__all__ = [
    "CARD_SUFFIX_JSON", "CARD_SUFFIX_MD", "SCHEMA_VERSION", "PrivacyCard", "card_paths",
    "render_markdown", "METADATA_KEY", "embed_card", "extract_card", "model_sha256",
]
