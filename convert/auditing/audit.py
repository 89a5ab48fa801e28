"""``dpconvert audit``: verify privacy cards, recompute ε, enforce a policy.

For every model found (a file, its card, or a directory scanned recursively):
card present (sidecar and/or embedded) → schema valid → copies agree → model
hash matches → every privacy-relevant field checked against the card's own
accountant events (``card_checks``: ε, record-level ε, scope and adjacency
derived from the accountant, mechanism block, config, counts) → the noise was
secret (unless the policy allows seeded noise) → signature (``--trusted-keys``,
``--require-signature``) → policy → the ONNX model runs in onnxruntime on a
dummy batch of the card's input shape. No torch.
"""

from __future__ import annotations

import os

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from dpconvert.auditing.card_checks import as_float as _as_float
from dpconvert.auditing.card_checks import check_card, noise_blocks
from dpconvert.errors import DpconvertError

MODEL_SUFFIXES = (".onnx", ".pt", ".pt2", ".safetensors")


@dataclass
class Policy:
    max_eps: Optional[float] = None
    max_delta: Optional[float] = None
    require_scope: Optional[str] = None
    max_record_eps: Optional[float] = None
    min_accuracy: Optional[float] = None
    allow_missing: bool = False
    allow_seeded_noise: bool = False  # by default a card whose noise was seeded (not secret) fails
    require_signature: bool = False
    trusted_keys: Optional[str] = None  # a directory of *.pub Ed25519 keys (or one key file)
    max_per_image_eps: Optional[float] = None  # public-image queries: bound the ε for all the answers about one source image

    def __post_init__(self) -> None:
        if self.require_scope not in (None, "query", "record"):
            raise DpconvertError(f"--require-scope must be query or record, got {self.require_scope!r}")
        if self.require_signature and self.trusted_keys is None:
            raise DpconvertError("--require-signature needs --trusted-keys DIR (the public keys whose signatures you accept)")
        self.trusted = None
        if self.trusted_keys is not None:
            from dpconvert.zoo_cards.signing import load_trusted_keys

            self.trusted = load_trusted_keys(self.trusted_keys)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "trusted"}


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
    accuracy: Optional[float] = None  # the card's utility block (empirical, not DP-covered)
    membership: Optional[dict] = None  # target → the best attack of the card's membership-inference audit (empirical)

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
        readme = _hub_readme_card(model_path)
        a.card = a.card or (f"{model_path.parent / 'README.md'} (model card)" if readme else None)
    except DpconvertError as e:
        a.add("card valid", False, str(e))
        return a
    copies = {name: c for name, c in (("sidecar", sidecar), ("embedded", embedded), ("README.md", readme)) if c is not None}
    if not copies:
        a.add("card present", policy.allow_missing, "no privacy card: no DP guarantee" + (" (allowed by --allow-missing)" if policy.allow_missing else ""))
        return a
    card = next(iter(copies.values()))
    a.add("card present", True, " + ".join(copies))
    a.add("card valid", True, f"schema {card.data['schema_version']}")
    if len(copies) > 1:
        agree = all(c.data == card.data for c in copies.values())
        a.add("copies agree", agree, "" if agree else f"the copies ({', '.join(copies)}) differ")
    g = card.data["guarantee"]
    a.epsilon, a.delta, a.scope = _as_float(g["epsilon"]), float(g["delta"]), g["scope"]
    a.accuracy, a.membership = _empirical(card.data)
    a.record_level_epsilon = _as_float(g["record_level_epsilon"])

    if model_path.exists():
        actual = _hash(model_path, proto, card.data["model"])
        a.add("model hash", actual == card.model_sha256, "" if actual == card.model_sha256 else "weights/graph differ from the card (sha256 mismatch)")
    true, problems = check_card(card.data)
    if true:
        a.recomputed_epsilon = true["epsilon"]
        a.scope = true["scope"]  # derived from the accountant, never read from the card
        a.record_level_epsilon = max(a.record_level_epsilon, true["record_level_epsilon"])
    a.add("ε recomputed", bool(true) and not any(f == "guarantee.epsilon" for f, _ in problems),
          f"{true['epsilon']:.6g}" if true else "the events cannot be replayed")
    for where, message in problems:
        a.add(f"consistent: {where}", False, f"{where}: {message}")
    if not problems:
        a.add("card consistent", True, "every privacy-relevant field agrees with the accountant events")
    _check_signature(a, card, policy)

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

    from dpconvert.io.hashing import file_sha256

    if proto is not None:
        return model_sha256(proto)
    return file_sha256(model_path)


def _check_signature(a: ModelAudit, card, p: Policy) -> None:
    from dpconvert.zoo_cards.signing import verify_card

    status, detail = verify_card(card, p.trusted)
    if status == "unsigned":
        a.add("signature", not p.require_signature, "the card is not signed" + (" (--require-signature)" if p.require_signature else ""))
    elif status == "unchecked":
        a.add("signature", not p.require_signature, detail + (" (--require-signature needs --trusted-keys)" if p.require_signature else ""))
    else:
        a.add("signature", status == "valid", detail)


def _apply_policy(a: ModelAudit, data: dict, p: Policy) -> None:
    eps = max(a.epsilon, a.recomputed_epsilon if a.recomputed_epsilon is not None else a.epsilon)
    rec = a.record_level_epsilon  # the larger of the card's and the recomputed one
    if p.max_eps is not None:
        a.add("policy max ε", eps <= p.max_eps, f"ε={eps:.4g} > {p.max_eps:g}" if eps > p.max_eps else "")
    if p.max_delta is not None:
        a.add("policy max δ", a.delta <= p.max_delta, f"δ={a.delta:g} > {p.max_delta:g}" if a.delta > p.max_delta else "")
    if p.require_scope is not None:
        a.add("policy scope", a.scope == p.require_scope, f"scope is {a.scope!r}, policy requires {p.require_scope!r}" if a.scope != p.require_scope else "")
    if p.max_record_eps is not None:
        ok = rec <= p.max_record_eps
        a.add("policy max record-level ε", ok, "" if ok else f"record-level ε={rec:.4g} > {p.max_record_eps:g}")
    seeded = [where for where, m in noise_blocks(data) if m.get("noise_secret") is not True]  # older cards lack the field: not secret
    if seeded and p.allow_seeded_noise:
        a.add("secret noise", True, "seeded noise allowed by --allow-seeded-noise: the ε does not hold against anyone who knows the seed")
    else:
        a.add("secret noise", not seeded, "" if not seeded else f"{', '.join(seeded)}: the DP noise was not secret (seeded from --seed, or "
              "not recorded): anyone with the seed can subtract it; reconvert without --seeded-noise")
    if p.max_per_image_eps is not None:
        v = (data.get("guarantee") or {}).get("per_image_epsilon")
        if v is None:
            a.add("policy max per-image ε", True, "no public-image queries")
        else:
            ok = _as_float(v) <= p.max_per_image_eps
            a.add("policy max per-image ε", ok, "" if ok else f"per-image ε={_as_float(v):.4g} > {p.max_per_image_eps:g}")
    if p.min_accuracy is not None:
        acc = (data.get("utility") or {}).get("student_accuracy")
        ok = acc is not None and acc >= p.min_accuracy
        a.add("policy min accuracy", ok, "" if ok else ("no accuracy on the card" if acc is None else f"accuracy {acc:.4f} < {p.min_accuracy:g}"))


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


def _hub_readme_card(model_path: Path):
    """The card in a Hugging Face-style README.md beside the model (``card export --format hf``), when it names this
    model file or the folder holds no other model; None otherwise."""
    from dpconvert.zoo_cards.hf import card_from_model_card

    readme = model_path.parent / "README.md"
    if not readme.is_file():
        return None
    card = card_from_model_card(readme.read_text(encoding="utf-8", errors="replace"), str(readme))
    if card is None:
        return None
    others = [f for f in model_path.parent.iterdir() if f.suffix.lower() in MODEL_SUFFIXES and f != model_path]
    return card if card.data["model"]["file"] == model_path.name or not others else None


def _empirical(data: dict) -> tuple[Optional[float], Optional[dict]]:
    """(student accuracy, {target: best attack}) from a card's utility and audit blocks, for reports; never checked as a guarantee."""
    accuracy = (data.get("utility") or {}).get("student_accuracy")
    results = (data.get("audit") or {}).get("results") or {}
    best = {}
    for target, attacks in results.items() if isinstance(results, dict) else ():
        rows = list(attacks.values()) if isinstance(attacks, dict) else list(attacks or [])  # {attack: metrics} as `--write-card` stores it
        rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("tpr_at_0.1%_fpr"), (int, float))]
        if rows:
            best[target] = max(rows, key=lambda r: r["tpr_at_0.1%_fpr"])
    return (float(accuracy) if isinstance(accuracy, (int, float)) else None), (best or None)


def audit(paths: list[str], policy: Policy) -> list[ModelAudit]:
    models = discover(paths)
    if not models:
        raise DpconvertError(f"no models found under {', '.join(paths)} (looked for {', '.join(MODEL_SUFFIXES)} and *.card.json)")
    if len(models) < PARALLEL_FROM or (os.cpu_count() or 1) < 2:
        return [audit_model(m, policy) for m in models]
    # Replaying a DP-SGD or GAN card's PLD takes about a second: a zoo is audited on every core (order kept)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(os.cpu_count() or 1, 8)) as pool:
        return list(pool.map(audit_model, models, [policy] * len(models), chunksize=4))


PARALLEL_FROM = 16  # models; below this the workers' start-up costs more than it saves
