"""``dpconvert audit``: verify privacy cards, recompute ε, enforce a policy.

For every model or data set found (a file, its card, or a directory scanned recursively): the ONNX file obeys
ONNX's rules (one value per metadata key) → card present (sidecar and/or embedded) → schema valid (every field
typed, numbers finite) → every copy people or tools read is the checked card or rendered from it (sidecar,
embedded, ``.card.md``, a Hub README) → model or data hash matches → every privacy-relevant field checked against
the card's own accountant events (``card_checks``: ε, record-level ε, scope and adjacency derived from the
accountant, mechanism block, config, counts, cross-checks, coverage, required warnings) → the noise was secret
(unless the policy allows seeded noise) → signature → policy (δ at most the ceiling unless ``max_delta`` says
otherwise) → the ONNX model runs in onnxruntime on a dummy batch. No torch. Nothing here raises on a malformed
input: every problem is a failed check with a one-line reason.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from dpconvert.auditing.card_checks import as_float as _as_float
from dpconvert.auditing.card_checks import check_card, noise_blocks
from dpconvert.accounting.statements import DELTA_CEILING
from dpconvert.errors import DpconvertError
from dpconvert.option_fields import option
from dpconvert.zoo_cards.read import DATA_SUFFIXES, MODEL_SUFFIXES


POLICY = "Policy"  # the panel of the policy options


@dataclass
class Policy:
    """What a model must satisfy beyond a card that verifies; each field is a command-line option of ``audit`` (and, in
    part, ``card verify``), declared here once."""

    max_eps: Optional[float] = option(None, help="Fail models whose ε exceeds this.", panel=POLICY)
    max_delta: Optional[float] = option(None, help="Fail models whose δ exceeds this.", panel=POLICY,
                                        default_text=f"the ceiling {DELTA_CEILING:g}")
    require_scope: Optional[str] = option(None, help="Require this scope (record for DP-SGD, Private-kNN, AdLM; query for DPDFD).",
                                          panel=POLICY, choices=("record", "query"))
    max_record_eps: Optional[float] = option(None, help="Fail models whose record-level ε exceeds this.", panel=POLICY)
    min_accuracy: Optional[float] = option(None, help="Fail models whose card reports lower student accuracy.", panel=POLICY)
    allow_missing: bool = option(False, help="Models without a card pass (reported as 'no DP guarantee').", panel=POLICY)
    allow_seeded_noise: bool = option(False, help="Let models whose DP noise was seeded (`seeded_noise`: reproducible, not secret) "
                                      "pass; by default they fail.", panel=POLICY)
    require_signature: bool = option(False, help="Fail models whose card is not signed by a key in `trusted_keys`.", panel=POLICY)
    trusted_keys: Optional[str] = option(None, help="A folder of *.pub Ed25519 keys (or one key): signatures by these keys are "
                                         "verified, others fail.", panel=POLICY)
    max_per_image_eps: Optional[float] = option(None, help="Fail DPDFD models on public-image queries whose ε for all the answers "
                                                "about one source image exceeds this.", panel=POLICY)

    def __post_init__(self) -> None:
        if self.require_scope not in (None, "query", "record"):
            raise DpconvertError(fix=f"`require_scope` must be query or record, got {self.require_scope!r}", param="require_scope")
        for name in ("max_eps", "max_delta", "max_record_eps", "min_accuracy", "max_per_image_eps"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise DpconvertError(fix=f"`{name}` must be a finite number ≥ 0, got {v!r}", param=name)
        if self.require_signature and self.trusted_keys is None:
            raise DpconvertError(fix="`require_signature` needs `trusted_keys` DIR (the public keys whose signatures you accept)", param="require_signature")
        self.trusted = None
        if self.trusted_keys is not None:
            from dpconvert.zoo_cards.signing import load_trusted_keys

            self.trusted = load_trusted_keys(self.trusted_keys)

    @property
    def delta_limit(self) -> float:
        return DELTA_CEILING if self.max_delta is None else self.max_delta

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
    kind: Optional[str] = None  # "model" or "data" (a synthetic data set's card)
    accuracy: Optional[float] = None  # the card's utility block (empirical, not DP-covered)
    membership: Optional[dict] = None  # target → the best attack of the card's membership-inference audit (empirical)

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return ok

    def failures(self) -> list[str]:
        """One line per failed check: its name and why (a detail that starts with the field the name ends with says it once)."""
        def line(c: Check) -> str:
            if not c.detail:
                return c.name
            head, _, field = c.name.partition(": ")
            return f"{head}: {c.detail}" if field and c.detail.startswith(field + ":") else f"{c.name}: {c.detail}"
        return [line(c) for c in self.checks if not c.ok]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d


def discover(paths: list[str]) -> list[Path]:
    """Models and data sets (and cards whose file is missing) under the given paths. In a folder, a data set (.npz) is
    a release only when its card sits beside it; other .npz files are data, not releases."""
    from dpconvert.zoo_cards import CARD_SUFFIX_JSON
    from dpconvert.zoo_cards.read import artifact_of

    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise DpconvertError(f"{raw}: no such file or directory", fix="give model files, data sets, cards or a zoo directory")
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file())
            found += [f for f in files if f.suffix.lower() in MODEL_SUFFIXES]
            found += [f for f in files if f.suffix.lower() in DATA_SUFFIXES and f.with_name(f.name + CARD_SUFFIX_JSON).is_file()]
            found += [c for c in files if c.name.endswith(CARD_SUFFIX_JSON) and not artifact_of(c).exists()]  # orphan cards are reported too
        elif p.name.endswith(CARD_SUFFIX_JSON):
            model = artifact_of(p)
            found.append(model if model.exists() else p)
        elif p.suffix.lower() in MODEL_SUFFIXES + DATA_SUFFIXES:
            found.append(p)
        else:
            raise DpconvertError(f"{raw}: not a model ({', '.join(MODEL_SUFFIXES)}), a data set (.npz) or a *{CARD_SUFFIX_JSON} card")
    seen, unique = set(), []
    for f in found:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append(f)
    return unique


def audit_model(path: Path, policy: Policy, run_model: bool = True) -> ModelAudit:
    """Every check on one model or data set. Never raises: an auditor reads files written by anyone, so anything
    that goes wrong becomes a failed check with a one-line reason (and the other models of a zoo are still audited)."""
    a = ModelAudit(str(path))
    try:
        _audit_into(a, Path(path), policy, run_model)
    except DpconvertError as e:
        a.add("card valid", False, _one_line(str(e)))
    except Exception as e:  # noqa: BLE001 — a malformed input (RecursionError included) must never end the audit of a zoo
        a.add("audit", False, f"could not be audited: {type(e).__name__}: {_one_line(str(e))}")
    return a


def _one_line(message: str) -> str:
    line = " ".join(str(message).split())
    return line if len(line) <= 300 else line[:297] + "…"


def _audit_into(a: ModelAudit, path: Path, policy: Policy, run_model: bool) -> None:
    from dpconvert.zoo_cards.read import artifact_of, read_card_copies

    artifact = artifact_of(path)
    if not artifact.exists():
        a.add("model file", False, f"{artifact.name} not found next to the card")
    try:
        copies = read_card_copies(path)
    except DpconvertError as e:
        a.add("card valid", False, _one_line(str(e)))
        return
    if copies.proto is not None:
        _check_onnx_file(a, copies.proto)
        _check_unbound_text(a, copies.proto, policy)
    if not copies.cards:
        a.add("card present", policy.allow_missing, "no privacy card: no DP guarantee" + (" (allowed by `allow_missing`)" if policy.allow_missing else ""))
        return
    card = next(iter(copies.cards.values()))
    a.card = str(artifact.with_name(artifact.name + ".card.json")) if "sidecar" in copies.cards else f"{artifact.name} ({next(iter(copies.cards))})"
    a.kind = card.kind
    a.add("card present", True, " + ".join(copies.cards))
    a.add("card valid", True, f"{card.kind} card, schema {card.data['schema_version']}")
    for name, ok, detail in copies.problems(card):
        a.add(name, ok, detail)
    g = card.data["guarantee"]
    a.epsilon, a.delta, a.scope = _as_float(g["epsilon"]), float(g["delta"]), g["scope"]
    a.accuracy, a.membership = _empirical(card.data)
    a.record_level_epsilon = _as_float(g["record_level_epsilon"])

    actual = copies.artifact_sha256()
    if actual is not None:
        what = "data" if card.kind == "data" else "weights/graph"
        a.add("data hash" if card.kind == "data" else "model hash", actual == card.model_sha256,
              "" if actual == card.model_sha256 else f"{what} differ from the card (sha256 mismatch)")
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
    if run_model and copies.proto is not None:
        _check_runs(a, artifact, card.data["model"]["input_shape"])


def _check_onnx_file(a: ModelAudit, proto) -> None:
    """ONNX's own rules (one value per metadata key among them): a file other tools would read differently fails."""
    import onnx

    from dpconvert.zoo_cards.onnx_meta import duplicate_metadata_keys

    dup = duplicate_metadata_keys(proto)
    a.add("ONNX metadata", not dup, "" if not dup else f"duplicate metadata key(s) {', '.join(map(repr, dup))}: readers disagree on which value counts")
    try:
        onnx.checker.check_model(proto)
        a.add("ONNX checker", True)
    except Exception as e:  # noqa: BLE001 — onnx raises several types
        a.add("ONNX checker", False, _one_line(str(e).splitlines()[0] if str(e) else type(e).__name__))


PRIVACY_WORDS = re.compile(r"privacy|private|epsilon|ε|δ|delta|\bdp\b|differential|guarantee|certif|dpconvert", re.IGNORECASE)


def _check_unbound_text(a: ModelAudit, proto, p: Policy) -> None:
    """ONNX text outside the graph and outside the card (other metadata entries, the model's doc string) is covered by
    neither the model hash nor the card's signature: one that speaks of privacy fails (a reader would take it for the
    card), and under `require_signature` any such text fails (a signed model carries nothing unsigned)."""
    from dpconvert.zoo_cards import METADATA_KEY

    texts = [(f"metadata {e.key!r}", f"{e.key} {e.value}") for e in proto.metadata_props if e.key != METADATA_KEY]
    if proto.doc_string:
        texts.append(("doc_string", proto.doc_string))
    loud = [where for where, text in texts if PRIVACY_WORDS.search(text)]
    if loud:
        a.add("ONNX text outside the card", False, f"{', '.join(loud)} speaks of privacy outside the card (bound by neither the model hash "
              "nor the card's signature): remove it, the card is the one place for claims")
    elif texts and p.require_signature:
        a.add("ONNX text outside the card", False, f"{', '.join(w for w, _ in texts)} is not covered by the signature (`require_signature`): "
              "remove it or put it on the card before signing")


def _check_signature(a: ModelAudit, card, p: Policy) -> None:
    from dpconvert.zoo_cards.signing import verify_card

    status, detail = verify_card(card, p.trusted)
    if status == "unsigned":
        a.add("signature", not p.require_signature, "the card is not signed" + (" (`require_signature`)" if p.require_signature else ""))
    elif status == "unchecked":
        a.add("signature", not p.require_signature, detail + (" (`require_signature` needs `trusted_keys`)" if p.require_signature else ""))
    else:
        a.add("signature", status == "valid", detail)
    inherited = ((card.data.get("teacher") or {}).get("guarantee") or {}).get("card")
    if isinstance(inherited, dict):  # the teacher card the inherited guarantee rests on: verified here, never read from the card
        from dpconvert.zoo_cards import PrivacyCard

        status, detail = verify_card(PrivacyCard(inherited), p.trusted)
        ok = status == "valid" or (status in ("unsigned", "unchecked") and not p.require_signature)
        a.add("teacher card signature", ok, detail + (" (`require_signature`: the teacher's guarantee needs its card signed by a trusted key)"
                                                      if not ok and p.require_signature else ""))


def _apply_policy(a: ModelAudit, data: dict, p: Policy) -> None:
    eps = max(a.epsilon, a.recomputed_epsilon if a.recomputed_epsilon is not None else a.epsilon)
    rec = a.record_level_epsilon  # the larger of the card's and the recomputed one
    a.add("differentially private", math.isfinite(eps), "" if math.isfinite(eps) else
          "ε = ∞: trained without noise (`no_privacy`), for comparison only; no policy admits it")
    if p.max_eps is not None:
        a.add("policy max ε", eps <= p.max_eps, f"ε={eps:.4g} > {p.max_eps:g}" if eps > p.max_eps else "")
    limit = p.delta_limit
    a.add("policy max δ", a.delta <= limit, "" if a.delta <= limit else f"δ={a.delta:g} > {limit:g}" +
          (" (the default ceiling; `max_delta` admits a larger δ)" if p.max_delta is None else ""))
    if p.require_scope is not None:
        a.add("policy scope", a.scope == p.require_scope, f"scope is {a.scope!r}, policy requires {p.require_scope!r}" if a.scope != p.require_scope else "")
    if p.max_record_eps is not None:
        ok = rec <= p.max_record_eps
        a.add("policy max record-level ε", ok, "" if ok else f"record-level ε={rec:.4g} > {p.max_record_eps:g}")
    seeded = [where for where, m in noise_blocks(data) if m.get("noise_secret") is not True]  # older cards lack the field: not secret
    if seeded and p.allow_seeded_noise:
        a.add("secret noise", True, "seeded noise allowed by `allow_seeded_noise`: the ε does not hold against anyone who knows the seed")
    else:
        a.add("secret noise", not seeded, "" if not seeded else f"{', '.join(seeded)}: the DP noise was not secret (seeded from `seed`, or "
              "not recorded): anyone with the seed can subtract it; reconvert without `seeded_noise`")
    if p.max_per_image_eps is not None:
        v = (data.get("guarantee") or {}).get("per_image_epsilon")
        if v is None:
            a.add("policy max per-image ε", True, "no public-image queries")
        else:
            ok = _as_float(v) <= p.max_per_image_eps
            a.add("policy max per-image ε", ok, "" if ok else f"per-image ε={_as_float(v):.4g} > {p.max_per_image_eps:g}")
    if p.min_accuracy is not None and a.kind == "data":
        a.add("policy min accuracy", True, "not applicable to a data set")
    elif p.min_accuracy is not None:
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
    except Exception as e:  # noqa: BLE001 — onnxruntime raises its own types
        a.add("runs in onnxruntime", False, _one_line(str(e).splitlines()[0] if str(e) else type(e).__name__))


def _empirical(data: dict) -> tuple[Optional[float], Optional[dict]]:
    """(student accuracy, {target: best attack}) from a card's utility and audit blocks, for reports; never checked as a guarantee."""
    accuracy = (data.get("utility") or {}).get("student_accuracy")
    results = (data.get("audit") or {}).get("results") or {}
    best = {}
    for target, attacks in results.items() if isinstance(results, dict) else ():
        rows = list(attacks.values()) if isinstance(attacks, dict) else list(attacks or [])  # {attack: metrics} as `--write-card` stores it
        rows = [r for r in rows if isinstance(r, dict) and all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                                                               for k in ("tpr_at_0.1%_fpr", "tpr_at_1%_fpr", "auc"))]
        if rows:
            best[target] = max(rows, key=lambda r: r["tpr_at_0.1%_fpr"])
    return (float(accuracy) if isinstance(accuracy, (int, float)) else None), (best or None)


def audit(paths: list[str], policy: Policy) -> list[ModelAudit]:
    models = discover(paths)
    if not models:
        raise DpconvertError(f"no models found under {', '.join(paths)} (looked for {', '.join(MODEL_SUFFIXES)}, data sets with a card, "
                             "and *.card.json)")
    if len(models) < PARALLEL_FROM or (os.cpu_count() or 1) < 2:
        return [audit_model(m, policy) for m in models]
    # Replaying a DP-SGD or GAN card's PLD takes about a second: a zoo is audited on every core (order kept)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(os.cpu_count() or 1, 8)) as pool:
        return list(pool.map(audit_model, models, [policy] * len(models), chunksize=4))


PARALLEL_FROM = 16  # models; below this the workers' start-up costs more than it saves
