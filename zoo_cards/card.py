"""A privacy card as a typed object over a schema-validated JSON document.

The JSON Schema ships in ``schemas/privacy-card-<version>.json``; unknown
versions and malformed documents are one-line ``DpconvertError``s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from dpconvert.errors import DpconvertError

SCHEMA_VERSION = "1.0"
CARD_SUFFIX_JSON = ".card.json"
CARD_SUFFIX_MD = ".card.md"
_SCHEMAS = Path(__file__).with_name("schemas")


def supported_versions() -> list[str]:
    return sorted(p.name[len("privacy-card-"):-len(".json")] for p in _SCHEMAS.glob("privacy-card-*.json"))


@lru_cache(maxsize=None)
def schema(version: str) -> dict:
    path = _SCHEMAS / f"privacy-card-{version}.json"
    if not path.exists():
        raise DpconvertError(
            f"unknown privacy-card schema version {version!r}; this dpconvert reads {', '.join(supported_versions())} — upgrade dpconvert"
        )
    return json.loads(path.read_text())


def card_paths(model_path: str | Path) -> tuple[Path, Path]:
    """Sidecar paths: ``<out>.card.json`` and ``<out>.card.md`` next to the model."""
    p = Path(model_path)
    return p.with_name(p.name + CARD_SUFFIX_JSON), p.with_name(p.name + CARD_SUFFIX_MD)


@dataclass
class PrivacyCard:
    data: dict[str, Any]

    # ---------------------------------------------------------------- access
    @property
    def epsilon(self) -> float:
        return float(self.data["guarantee"]["epsilon"])

    @property
    def delta(self) -> float:
        return float(self.data["guarantee"]["delta"])

    @property
    def scope(self) -> str:
        return self.data["guarantee"]["scope"]

    @property
    def record_level_epsilon(self) -> float:
        v = self.data["guarantee"]["record_level_epsilon"]
        return float("inf") if isinstance(v, str) else float(v)

    @property
    def model_sha256(self) -> str:
        return self.data["model"]["sha256"]

    # ---------------------------------------------------------------- validation and I/O
    def validate(self, source: str = "card") -> "PrivacyCard":
        import jsonschema

        if not isinstance(self.data, dict):
            raise DpconvertError(f"{source}: a privacy card must be a JSON object")
        version = self.data.get("schema_version")
        if not isinstance(version, str):
            raise DpconvertError(f"{source}: no schema_version; not a dpconvert privacy card")
        try:
            jsonschema.validate(self.data, schema(version))
        except jsonschema.ValidationError as e:
            where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
            raise DpconvertError(f"{source}: invalid privacy card at {where}: {e.message[:200]}") from None
        return self

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=False, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "card") -> "PrivacyCard":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DpconvertError(f"{source}: not valid JSON ({e.msg} at line {e.lineno}); the card is truncated or corrupt") from None
        return cls(data).validate(source)

    @classmethod
    def read(cls, path: str | Path) -> "PrivacyCard":
        p = Path(path)
        if not p.is_file():
            raise DpconvertError(f"{path}: no such card file")
        return cls.from_json(p.read_text(encoding="utf-8", errors="replace"), str(path))
