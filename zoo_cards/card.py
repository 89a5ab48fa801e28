"""A privacy card as a typed object over a schema-validated JSON document.

Two kinds of card share the privacy blocks (guarantee, accounting, mechanism): a **model** card
(``schemas/privacy-card-<version>.json``: the student an ONNX file holds) and a **data** card
(``schemas/data-card-<version>.json``: a synthetic data set from ``dpconvert synth``). Reading is strict: a
card is JSON with finite numbers, nested no deeper than ``MAX_DEPTH``, valid against its schema; anything else is
one ``DpconvertError`` that names the field, never a crash (an auditor reads cards written by anyone).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from dpconvert.errors import DpconvertError

# 1.1: the teacher block derived in full (weights hash, composed guarantee); 1.2: mechanism.method is the method's one
# name (as `--method` and `--generator` spell it); 1.0 and 1.1 are still read
SCHEMA_VERSION = "1.2"
# mechanism.method on cards before schema 1.2, where it differed from the method's name
METHOD_NAMES_BEFORE_1_2 = {"pknn": "private-knn", "dpsgd": "dp-sgd", "dpgan": "dp-critic-gan"}
CARD_SUFFIX_JSON = ".card.json"
CARD_SUFFIX_MD = ".card.md"
DATA_CARD_FORMAT = "dpconvert-data-card/1"
MAX_DEPTH = 32  # genuine cards nest 8 deep; a deeper document is refused before any recursive code sees it
_SCHEMAS = Path(__file__).with_name("schemas")
_SCHEMA_PREFIX = {"model": "privacy-card", "data": "data-card"}


def card_method_name(name: str, version: str) -> str:
    """What a card of schema ``version`` writes as mechanism.method for method ``name``."""
    return METHOD_NAMES_BEFORE_1_2.get(name, name) if version in ("1.0", "1.1") else name


def supported_versions(kind: str = "model") -> list[str]:
    prefix = _SCHEMA_PREFIX[kind] + "-"
    return sorted(p.name[len(prefix):-len(".json")] for p in _SCHEMAS.glob(f"{prefix}*.json"))


@lru_cache(maxsize=None)
def schema(version: str, kind: str = "model") -> dict:
    path = _SCHEMAS / f"{_SCHEMA_PREFIX[kind]}-{version}.json"
    if not path.exists():
        raise DpconvertError(
            f"unknown {_SCHEMA_PREFIX[kind]} schema version {version!r} (this dpconvert reads {', '.join(supported_versions(kind))})",
            fix="upgrade dpconvert")
    return json.loads(path.read_text())


def card_paths(model_path: str | Path) -> tuple[Path, Path]:
    """Sidecar paths: ``<out>.card.json`` and ``<out>.card.md`` next to the model (or data set)."""
    p = Path(model_path)
    return p.with_name(p.name + CARD_SUFFIX_JSON), p.with_name(p.name + CARD_SUFFIX_MD)


def field_path(parts) -> str:
    """``guarantee.epsilon``, ``accounting.state.events[0].count``: how every message names a field."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def first_malformed_value(data: Any) -> tuple[str, str] | None:
    """(field, problem) of the first non-finite number or over-deep nesting in a decoded document (iterative: a
    hostile document cannot exhaust the stack here)."""
    stack = [(data, ())]
    while stack:
        value, where = stack.pop()
        if len(where) > MAX_DEPTH:
            return field_path(where), f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(value, float) and not math.isfinite(value):
            return field_path(where), f"{value!r} is not a finite number"
        if isinstance(value, dict):
            stack.extend((v, where + (str(k),)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, where + (i,)) for i, v in enumerate(value))
    return None


def _too_deep(text: str) -> str:
    """The field where ``text`` first nests deeper than MAX_DEPTH: a scan of brackets, keys and strings, for documents
    too deep for the JSON parser itself (which gives up with a RecursionError and no position)."""
    path: list = []  # one entry per open container: the key (object) or index (array) being read
    last_string, in_string, escaped = None, False, False
    start = 0
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string, last_string = False, text[start:i]
            continue
        if ch == '"':
            in_string, start = True, i + 1
        elif ch in "[{":
            if len(path) > MAX_DEPTH:
                break
            path.append(0 if ch == "[" else None)
        elif ch in "]}" and path:
            path.pop()
        elif ch == ":" and path:
            path[-1] = last_string
        elif ch == "," and path and isinstance(path[-1], int):
            path[-1] += 1
    return field_path([p for p in path if p is not None]) if path else "(top level)"


def parse_json(text: str, source: str) -> Any:
    """JSON as a card may hold it: no NaN/Infinity (Python's json accepts them) or 1e999 (decoded as ∞), no hostile
    nesting. They are decoded first and refused by ``first_malformed_value``, which names the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DpconvertError(f"{source}: not valid JSON ({e.msg} at line {e.lineno}); the card is truncated or corrupt") from None
    except ValueError as e:
        raise DpconvertError(f"{source}: not a valid card ({e})") from None
    except RecursionError:
        raise DpconvertError(f"{source}: invalid privacy card at {_too_deep(text)}: nested more than {MAX_DEPTH} levels deep") from None
    bad = first_malformed_value(data)
    if bad:
        raise DpconvertError(f"{source}: invalid privacy card at {bad[0]}: {bad[1]}")
    return data


@dataclass
class PrivacyCard:
    data: dict[str, Any]

    # ---------------------------------------------------------------- access
    @property
    def kind(self) -> str:
        """``data`` for a synthetic data set's card (a ``data`` block instead of ``model``), else ``model``."""
        return "data" if isinstance(self.data, dict) and "data" in self.data and "model" not in self.data else "model"

    @property
    def artifact(self) -> dict:
        """The block describing the released file: ``model`` or ``data`` (file name, sha256)."""
        return self.data[self.kind]

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
        """The sha256 the card binds: of the ONNX graph (model cards) or of the .npz bytes (data cards)."""
        return self.artifact["sha256"]

    # ---------------------------------------------------------------- validation and I/O
    def validate(self, source: str = "card") -> "PrivacyCard":
        import jsonschema

        if not isinstance(self.data, dict):
            raise DpconvertError(fix=f"{source}: a privacy card must be a JSON object")
        bad = first_malformed_value(self.data)
        if bad:
            raise DpconvertError(f"{source}: invalid privacy card at {bad[0]}: {bad[1]}")
        version = self.data.get("schema_version")
        if not isinstance(version, str):
            old = self.data.get("format") == DATA_CARD_FORMAT
            if old:
                raise DpconvertError(f"{source}: no schema_version: a data card written before data cards could be audited",
                                     fix="run `dpconvert synth` again")
            raise DpconvertError(f"{source}: no schema_version; not a dpconvert privacy card")
        validator = jsonschema.Draft202012Validator(schema(version, self.kind))
        error = jsonschema.exceptions.best_match(validator.iter_errors(self.data))  # descends into oneOf to the field at fault
        if error is not None:
            where, message = _named(error)
            raise DpconvertError(f"{source}: invalid privacy card at {where}: {message}")
        return self

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=False, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "card") -> "PrivacyCard":
        return cls(parse_json(text, source)).validate(source)

    @classmethod
    def read(cls, path: str | Path) -> "PrivacyCard":
        p = Path(path)
        if not p.is_file():
            raise DpconvertError(f"{path}: no such card file")
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise DpconvertError(f"{path}: cannot read the card ({e.strerror})") from None
        return cls.from_json(text, str(path))


def _named(error) -> tuple[str, str]:
    """(field, message) of a schema error, naming the unexpected or missing key itself rather than its parent."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in known)
        if extra:
            return field_path(path + [extra[0]]), "unknown field (not in this schema version)"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        if missing:
            return field_path(path + [missing[0]]), "missing"
    return field_path(path), _one_line(error.message)


def _one_line(message: str) -> str:
    line = " ".join(message.split())
    return line if len(line) <= 200 else line[:197] + "…"
