"""``dpconvert audit``: verify privacy cards, recompute ε, enforce a policy.

For every model found (a file, its card, or a directory scanned recursively):
card present (sidecar and/or embedded) → schema valid → copies agree → model
hash matches → ε recomputed from the card's own mechanism events with the
project's accountant (a card claiming less fails) → policy → the ONNX model
runs in onnxruntime on a dummy batch of the card's input shape. No torch.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from .errors import DpconvertError

MODEL_SUFFIXES = (".onnx", ".pt", ".pt2", ".safetensors")
REL_TOL = 1e-9


@dataclass
class Policy:
    max_eps: Optional[float] = None
    max_delta: Optional[float] = None
    require_scope: Optional[str] = None
    max_record_eps: Optional[float] = None
    min_accuracy: Optional[float] = None
    allow_missing: bool = False
    require_secret_noise: bool = False

    def __post_init__(self) -> None:
        if self.require_scope not in (None, "query", "record"):
            raise DpconvertError(f"--require-scope must be query or record, got {self.require_scope!r}")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class ModelAudit:
    path: str
    card: Optional[str] = None
    epsilon: Optional[float] = None
    recomputed_epsilon: Optional[float] = None
    delta: Optional[float] = None
    scope: Optional[str] = None
    record_level_epsilon: Optional[float] = None
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return ok

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" if c.detail else c.name for c in self.checks if not c.ok]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d


def discover(paths: list[str]) -> list[Path]:
    """Model files (and cards whose model is missing) under the given paths."""
    from dpconvert.zoo_cards import CARD_SUFFIX_JSON

    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise DpconvertError(f"{raw}: no such file or directory; give model files, cards or a zoo directory")
        if p.is_dir():
            models = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in MODEL_SUFFIXES)
            cards = sorted(f for f in p.rglob(f"*{CARD_SUFFIX_JSON}") if f.is_file())
            found += models
            found += [c for c in cards if not _model_of_card(c).exists()]  # orphan cards are reported too
        elif p.name.endswith(CARD_SUFFIX_JSON):
            model = _model_of_card(p)
            found.append(model if model.exists() else p)
        elif p.suffix.lower() in MODEL_SUFFIXES:
            found.append(p)
        else:
            raise DpconvertError(f"{raw}: not a model ({', '.join(MODEL_SUFFIXES)}) or a *{CARD_SUFFIX_JSON} card")
    seen, unique = set(), []
    for f in found:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append(f)
    return unique


def _model_of_card(card: Path) -> Path:
    from dpconvert.zoo_cards import CARD_SUFFIX_JSON

    return card.with_name(card.name[: -len(CARD_SUFFIX_JSON)])


def recompute(card_data: dict) -> dict[str, float]:
    """ε (reported scope) and the record-level worst case, from the card's events alone."""
    from .accounting import ACCOUNTANTS

    acct = card_data["accounting"]
    accountant = ACCOUNTANTS.get(acct["accountant"])().load_state_dict(acct["state"])
    delta = float(card_data["guarantee"]["delta"])
    out = {"epsilon": accountant.epsilon(delta=delta)}
    if hasattr(accountant, "record_level_epsilon"):
        out["record_level_epsilon"] = accountant.record_level_epsilon(delta=delta)
    if accountant.name == "dpdfd":
        _check_dpdfd_mechanism(card_data["mechanism"], accountant)
    return out


def _check_dpdfd_mechanism(mech: dict, accountant) -> None:
    """The mechanism block and the events must describe the same noise."""
    for e in accountant.events:
        for key in ("sigma", "clip", "batch_size"):
            if key in mech and not math.isclose(float(mech[key]), float(e.params[key]), rel_tol=REL_TOL):
                raise DpconvertError(f"mechanism {key}={mech[key]} disagrees with the accounted events ({key}={e.params[key]})")
    if "releases" in mech and int(mech["releases"]) != accountant.count("normalised_gaussian_release"):
        raise DpconvertError(f"mechanism says {mech['releases']} releases but the events count {accountant.count('normalised_gaussian_release')}")


def _as_float(v) -> float:
    return math.inf if isinstance(v, str) else float(v)


def audit_model(path: Path, policy: Policy, run_model: bool = True) -> ModelAudit:
    from dpconvert.zoo_cards import PrivacyCard, card_paths, extract_card
    from dpconvert.zoo_cards.onnx_meta import load_onnx

    a = ModelAudit(str(path))
    is_card_only = path.name.endswith(".card.json")
    model_path = _model_of_card(path) if is_card_only else path
    sidecar_path, _ = card_paths(model_path)
    sidecar = embedded = proto = None
    if is_card_only:
        a.add("model file", False, f"{model_path.name} not found next to the card")
    is_onnx = model_path.suffix.lower() == ".onnx" and model_path.exists()
    if is_onnx:
        try:
            proto = load_onnx(str(model_path))
        except DpconvertError as e:
            a.add("model readable", False, str(e))
    try:
        if sidecar_path.exists():
            sidecar = PrivacyCard.read(sidecar_path)
            a.card = str(sidecar_path)
        if proto is not None:
            embedded = extract_card(proto, model_path.name)
            a.card = a.card or f"{model_path.name} (embedded)"
    except DpconvertError as e:
        a.add("card valid", False, str(e))
        return a
    card = sidecar or embedded
    if card is None:
        a.add("card present", policy.allow_missing, "no privacy card: no DP guarantee" + (" (allowed by --allow-missing)" if policy.allow_missing else ""))
        return a
    a.add("card present", True, "sidecar + embedded" if sidecar and embedded else ("sidecar" if sidecar else "embedded"))
    a.add("card valid", True, f"schema {card.data['schema_version']}")
    if sidecar and embedded:
        a.add("copies agree", sidecar.data == embedded.data, "" if sidecar.data == embedded.data else "the sidecar and the embedded card differ")
    g = card.data["guarantee"]
    a.epsilon, a.delta, a.scope = _as_float(g["epsilon"]), float(g["delta"]), g["scope"]
    a.record_level_epsilon = _as_float(g["record_level_epsilon"])

    if model_path.exists():
        actual = _hash(model_path, proto, card.data["model"])
        a.add("model hash", actual == card.model_sha256, "" if actual == card.model_sha256 else "weights/graph differ from the card (sha256 mismatch)")
    try:
        r = recompute(card.data)
        a.recomputed_epsilon = r["epsilon"]
        ok = a.epsilon >= r["epsilon"] * (1 - REL_TOL)
        a.add("ε recomputed", ok, f"{r['epsilon']:.6g}" if ok else f"card claims ε={a.epsilon:.6g} but its mechanism gives ε={r['epsilon']:.6g}")
        if "record_level_epsilon" in r:
            ok = a.record_level_epsilon >= r["record_level_epsilon"] * (1 - REL_TOL)
            a.add("record-level ε recomputed", ok, "" if ok else f"card claims {a.record_level_epsilon:.6g} < recomputed {r['record_level_epsilon']:.6g}")
    except DpconvertError as e:
        a.add("ε recomputed", False, str(e))

    for m in _dpdfd_blocks(card.data):
        ok = not _may_repeat_inputs(m)
        a.add("inputs distinct", ok, "" if ok else "its DPDFD release drew public images without the distinct-input guard, so one answer "
              "could fill several rows and the card's query-level ε is understated: reconvert with a current dpconvert")

    canary = (card.data.get("audit") or {}).get("canary")
    if canary:  # an empirical lower bound above the proven upper bound means something is wrong
        lb = float(canary["epsilon_lower_bound"])
        a.add("canary bound ≤ ε", lb <= a.epsilon, f"empirical lower bound {lb:.4g}" if lb <= a.epsilon else
              f"canary audit lower bound {lb:.4g} exceeds the card's ε={a.epsilon:.4g}")
    _apply_policy(a, card.data, policy)
    if run_model and proto is not None:
        _check_runs(a, model_path, card.data["model"]["input_shape"])
    return a


def _hash(model_path: Path, proto, model_block: dict) -> str:
    from dpconvert.zoo_cards import model_sha256

    if proto is not None:
        return model_sha256(proto)
    h = hashlib.sha256()
    with open(model_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _apply_policy(a: ModelAudit, data: dict, p: Policy) -> None:
    eps = a.recomputed_epsilon if a.recomputed_epsilon is not None else a.epsilon
    eps = max(eps, a.epsilon)
    if p.max_eps is not None:
        a.add("policy max ε", eps <= p.max_eps, f"ε={eps:.4g} > {p.max_eps:g}" if eps > p.max_eps else "")
    if p.max_delta is not None:
        a.add("policy max δ", a.delta <= p.max_delta, f"δ={a.delta:g} > {p.max_delta:g}" if a.delta > p.max_delta else "")
    if p.require_scope is not None:
        a.add("policy scope", a.scope == p.require_scope, f"scope is {a.scope!r}, policy requires {p.require_scope!r}" if a.scope != p.require_scope else "")
    if p.max_record_eps is not None:
        ok = a.record_level_epsilon <= p.max_record_eps
        a.add("policy max record-level ε", ok, "" if ok else f"record-level ε={a.record_level_epsilon:.4g} > {p.max_record_eps:g}")
    if p.require_secret_noise:
        ok = all(m.get("noise_secret") is True for m in _mechanism_blocks(data))  # older cards lack the field: not secret
        a.add("policy secret noise", ok, "" if ok else "the DP noise was seeded from the seed on the card (reconvert with --secret-noise)")
    if p.min_accuracy is not None:
        acc = (data.get("utility") or {}).get("student_accuracy")
        ok = acc is not None and acc >= p.min_accuracy
        a.add("policy min accuracy", ok, "" if ok else ("no accuracy on the card" if acc is None else f"accuracy {acc:.4f} < {p.min_accuracy:g}"))


def _mechanism_blocks(data: dict) -> list[dict]:
    """The card's mechanism and, for Private-kNN on an in-run generator, that generator's DPDFD mechanism."""
    m = data.get("mechanism") or {}
    inner = (m.get("query_generator") or {}).get("dpdfd")
    return [m] + ([inner] if inner else [])


def _dpdfd_blocks(data: dict) -> list[dict]:
    m = data.get("mechanism") or {}
    return [b for b in _mechanism_blocks(data) if b is not m or m.get("method") == "dpdfd"]


def _may_repeat_inputs(m: dict) -> bool:
    """A DPDFD card from before ``Dpdfd.distinct_queries`` whose queries were public images: the same augmented image
    could sit in several rows of one release (up to 5 at B=100k from 5k images), sensitivity √k·C instead of C. The
    data-free priors are continuous and never repeated an input, so their older cards stay valid."""
    noisy = float(m.get("sigma") or 0) > 0  # at σ=0 the card says ε=∞, which repeats cannot understate
    return noisy and "public images" in str(m.get("query_source", "")) and not m.get("distinct_inputs")


def _check_runs(a: ModelAudit, model_path: Path, input_shape: list) -> None:
    import numpy as np
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
        shape = [2 if d is None else int(d) for d in input_shape]
        out = sess.run(None, {sess.get_inputs()[0].name: np.zeros(shape, np.float32)})[0]
        a.add("runs in onnxruntime", out.shape[0] == shape[0], f"output {list(out.shape)}")
    except Exception as e:
        a.add("runs in onnxruntime", False, str(e).splitlines()[0][:160])


def audit(paths: list[str], policy: Policy) -> list[ModelAudit]:
    models = discover(paths)
    if not models:
        raise DpconvertError(f"no models found under {', '.join(paths)} (looked for {', '.join(MODEL_SUFFIXES)} and *.card.json)")
    return [audit_model(m, policy) for m in models]
