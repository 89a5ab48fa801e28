"""Every privacy-relevant part of a card, checked against the accountant events it carries (no torch).

A card is only as good as its weakest field: a reader may look at ``guarantee.scope``, at the mechanism block,
at the config, or at ``record_level_epsilon``, so all of them must say what the events say. The events are the
one source of truth: ``recompute`` replays them with the project's accountants, and ``check_card`` returns one
problem per field that disagrees, is missing, or is unknown, each message naming the field. The scope and the
adjacency are derived from the accountant, never read from the card. (A card that is consistent but forged
as a whole can only be caught by a signature: ``zoo_cards/signing.py``.)
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from dpconvert.accounting.statements import (NO_NOISE_WARNING, NOT_COVERED, NOT_COVERED_DATA, NOT_COVERED_PUBLIC_IMAGES,
                                              PARITY_MAX_ABS_DIFF, PARITY_MIN_TOP1, SEEDED_WARNING, WEAK_PARITY_PREFIX)
from dpconvert.accounting.statements import DELTA_CEILING, EX_POST_WARNING, LARGE_DELTA_PREFIX
from dpconvert.accounting.accountant import GUARANTEE_QUESTIONS
from dpconvert.errors import DpconvertError
from dpconvert.registry import Registry

REL_TOL = 1e-9

GUARANTEE_KEYS = {"epsilon", "delta", "scope", "adjacency", "record_level_epsilon", "covers", "not_covered"}
ACCOUNTING_KEYS = {"accountant", "epsilons", "cross_check", "libraries", "calibrated", "target_epsilon", "state", "note"}
NOISE_KEYS = {"noise_rng", "noise_secret"}
DPDFD_KEYS = {"method", "sigma", "clip", "batch_size", "releases", "distill_loss", "distinct_inputs", "query_source", "config",
              "method_choice", "public_images", "device_defaults", "distinct_across_releases", "max_answers_per_input", "teachers",
              "disjoint_partitions", "query_generator", "prior_trial"} | NOISE_KEYS
PRIOR_TRIAL_KEYS = {"rows", "families", "images_per_family", "views_per_image", "effective_classes", "chosen"}
DPDFD_REQUIRED = {"method", "sigma", "clip", "batch_size", "releases", "distinct_inputs", "config"} | NOISE_KEYS
PKNN_KEYS = {"method", "k", "sampling_rate", "sampling", "sigma1", "threshold", "sigma2", "queries_asked", "queries_answered", "rounds",
             "features", "knn_search", "public_queries", "query_source", "labels", "config", "method_choice", "query_generator"} | NOISE_KEYS
PKNN_REQUIRED = {"method", "k", "sampling_rate", "sigma1", "threshold", "sigma2", "queries_asked", "queries_answered", "config"} | NOISE_KEYS
DPSGD_KEYS = {"method", "sigma", "clip", "sampling_rate", "steps", "count_sigma", "sampling", "engine", "trained", "labels", "teacher",
              "learning_rate_scale", "config", "method_choice"} | NOISE_KEYS
DPSGD_REQUIRED = {"method", "sigma", "clip", "sampling_rate", "steps", "count_sigma", "config"} | NOISE_KEYS
ADLM_KEYS = {"method", "epsilon_relevance", "epsilon_coefficients", "relevance_power", "features", "loss", "labels", "teacher", "corrections",
             "config", "method_choice"} | NOISE_KEYS
ADLM_REQUIRED = {"method", "epsilon_relevance", "epsilon_coefficients", "corrections", "config"} | NOISE_KEYS
GENERATOR_KEYS = {"file", "file_sha256", "trained_in_this_run", "architecture", "teacher_sha256", "dpdfd_epsilon_at_its_delta", "its_delta",
                  "samples", "dpdfd"}
GENERATOR_DPDFD_KEYS = {"sigma", "clip", "batch_size", "releases", "query_source", "noise_rng", "noise_secret", "distinct_inputs"}


def as_float(v) -> float:
    """Card numbers: JSON has no infinity, so ε = ∞ is the string "inf"."""
    if isinstance(v, bool):
        raise TypeError("a boolean is not a number")
    return math.inf if v == "inf" else float(v)


class Problems(list):
    """(field, message) pairs; ``check`` adds one when a condition fails."""

    def check(self, ok: bool, where: str, message: str) -> bool:
        if not ok:
            self.append((where, message))
        return ok

    def keys(self, block: dict, where: str, allowed: set, required: set) -> None:
        for k in sorted(set(block) - allowed):
            self.append((f"{where}.{k}", "unknown privacy-relevant field (this dpconvert cannot vouch for it)"))
        for k in sorted(required - set(block)):
            self.append((f"{where}.{k}", "missing"))


def recompute(data: dict):
    """(accountant, {"epsilon", "record_level_epsilon", ...}) replayed from the card's events alone."""
    from dpconvert.accounting import ACCOUNTANTS

    acct = data["accounting"]
    accountant = ACCOUNTANTS.get(acct["accountant"])().load_state_dict(acct["state"])
    delta = float(data["guarantee"]["delta"])
    return accountant, {**accountant.epsilons(delta=delta), **accountant.guarantee_figures(delta=delta)}


def _claims_at_least(p: Problems, claimed, true: float, where: str) -> None:
    try:
        c = as_float(claimed)
    except (TypeError, ValueError):
        p.append((where, f"not a number ({claimed!r})"))
        return
    p.check(c >= true * (1 - REL_TOL) or (math.isinf(true) and math.isinf(c)), where,
            f"card says {c:.6g} but the accountant events give {true:.6g}")


def _same(p: Problems, block: dict, key: str, value, where: str, *, nullable: bool = False) -> None:
    """``block[key]`` (when present) equals ``value``. A null is a claim too: only settings that mean "calibrate"
    (``nullable``) may be null; anywhere else a null would hide the number a reader relies on."""
    if key not in block:
        return
    if block[key] is None:
        p.check(nullable, f"{where}.{key}", f"null, but the accountant events say {value!r}")
        return
    try:
        ok = math.isclose(float(block[key]), float(value), rel_tol=REL_TOL)
    except (TypeError, ValueError):
        ok = False
    p.check(ok, f"{where}.{key}", f"{block[key]!r} disagrees with the accountant events ({value!r})")


def check_card(data: dict) -> tuple[dict, Problems]:
    """(recomputed ε values, problems). An empty problem list means every privacy-relevant field agrees with the events."""
    p = Problems()
    g, acct = data.get("guarantee") or {}, data.get("accounting") or {}
    try:
        accountant, true = recompute(data)
    except (DpconvertError, KeyError, TypeError, ValueError) as e:
        p.append(("accounting.state", f"cannot replay the events ({str(e).splitlines()[0][:160]})"))
        return {}, p
    _check_events(p, accountant, data)
    p.keys(g, "guarantee", GUARANTEE_KEYS | set(accountant.guarantee_keys()), GUARANTEE_KEYS)
    p.keys(acct, "accounting", ACCOUNTING_KEYS, {"accountant", "epsilons", "state", "calibrated"})
    p.check(g.get("scope") == accountant.scope, "guarantee.scope",
            f"card says {g.get('scope')!r} but {accountant.name!r} events prove {accountant.scope!r}")
    p.check(g.get("adjacency") == accountant.adjacency, "guarantee.adjacency", f"does not match the {accountant.name!r} accountant's adjacency")
    _claims_at_least(p, g.get("epsilon"), true["epsilon"], "guarantee.epsilon")
    _claims_at_least(p, g.get("record_level_epsilon"), true["record_level_epsilon"], "guarantee.record_level_epsilon")
    for key in GUARANTEE_QUESTIONS:
        if key in true:
            _claims_at_least(p, g.get(key), true[key], f"guarantee.{key}")
    bounds = acct.get("epsilons") or {}
    for k in sorted(bounds):
        if p.check(k in true and k not in ("epsilon", "query_level_epsilon", "queries_record_level_epsilon"), f"accounting.epsilons.{k}", "not a bound this accountant computes"):
            _claims_at_least(p, bounds[k], true[k], f"accounting.epsilons.{k}")
    if acct.get("calibrated") and acct.get("target_epsilon") is not None:
        p.check(true["epsilon"] <= as_float(acct["target_epsilon"]) * (1 + REL_TOL), "accounting.target_epsilon",
                f"the events give ε={true['epsilon']:.6g}, above the calibration target {acct['target_epsilon']}")
    _check_cross_check(p, accountant, acct.get("cross_check"), float(data["guarantee"]["delta"]))
    CHECKS.get(accountant.name)(p, accountant, data)
    _check_noise_claims(p, data)
    _check_statements(p, accountant, data)
    _check_warnings(p, accountant, data)
    _check_teacher(p, accountant, data)
    _check_descriptions(p, accountant, data)
    return {**true, "scope": accountant.scope}, p


# What a descriptive field says → the accounting it needs (a reader who sees the words must find the numbers behind
# them): (field, phrase it contains, accountants that account for it, what the words claim).
GAN_ACCOUNTANTS = ("dpdfd_per_answer+dpgan", "pknn+dpgan")
DESCRIPTIONS = (
    ("mechanism.query_source", "gan with a dp critic", GAN_ACCOUNTANTS, "queries from a GAN trained on the private data"),
    ("mechanism.query_source", "dp-critic gan", GAN_ACCOUNTANTS, "queries from a GAN trained on the private data"),
    ("mechanism.method_choice", "dp-critic gan", GAN_ACCOUNTANTS, "queries from a GAN trained on the private data"),
    ("mechanism.query_source", "dpdfd generator", ("pknn+dpdfd_generator",), "queries from a generator trained by DPDFD"),
    ("mechanism.method_choice", "disjoint partitions", ("dpdfd_disjoint_teachers",), "teachers on disjoint partitions"),
)
# The δ a query generator's own ε is stated at, as a share of the card's δ (its part of the composition); None: the
# saved generator's own card's δ (any δ within the ceiling).
ITS_DELTA_SHARE = {"dpdfd_per_answer+dpgan": 1.0, "pknn+dpgan": 0.5, "pknn+dpdfd_generator": 0.5}


def _check_descriptions(p: Problems, accountant, data: dict) -> None:
    """Every descriptive value that implies a mechanism is backed by that mechanism's accountant and events; a query
    generator's own ε is stated at the δ share its part of the composition has."""
    for field, phrase, accountants, claim in DESCRIPTIONS:
        block, key = field.split(".")
        value = (data.get(block) or {}).get(key)
        if isinstance(value, str) and phrase in value.lower():
            p.check(accountant.name in accountants, field,
                    f"says {claim} ({phrase!r}), but the card's accountant {accountant.name!r} does not account for it "
                    f"(needs {' or '.join(accountants)})")
    info = (data.get("mechanism") or {}).get("query_generator")
    if isinstance(info, dict) and "trained_in_this_run" in info:  # decides which δ its ε is read at: "x" or 7 must not pass as true
        p.check(isinstance(info["trained_in_this_run"], bool), "mechanism.query_generator.trained_in_this_run",
                f"{info['trained_in_this_run']!r}: must be true or false")
    share = ITS_DELTA_SHARE.get(accountant.name)
    if not isinstance(info, dict) or share is None or "its_delta" not in info:
        return
    delta = as_float((data.get("guarantee") or {}).get("delta", 0.0))
    if info.get("trained_in_this_run") is False or info.get("file") is not None:  # a saved generator: its own card's δ
        p.check(isinstance(info["its_delta"], (int, float)) and 0 < info["its_delta"] <= DELTA_CEILING, "mechanism.query_generator.its_delta",
                f"{info['its_delta']!r}: a saved generator's ε must be stated at a δ within the ceiling {DELTA_CEILING:g}")
        return
    _same(p, info, "its_delta", share * delta, "mechanism.query_generator")


def _check_cross_check(p: Problems, accountant, claimed, delta: float) -> None:
    """The cross-checks the Markdown card shows are bounds a reader may quote: recomputed like the others."""
    if not claimed:
        return
    if not p.check(hasattr(accountant, "cross_check"), "accounting.cross_check", f"the {accountant.name!r} accountant computes no cross-check"):
        return
    try:
        true = accountant.cross_check(delta=delta)
    except (ArithmeticError, ValueError, TypeError) as e:  # e.g. a negative σ, already named by the event checks
        p.append(("accounting.cross_check", f"cannot be recomputed from the events ({str(e).splitlines()[0][:120]})"))
        return
    for k in sorted(claimed):
        if p.check(k in true, f"accounting.cross_check.{k}", "not a cross-check this accountant computes"):
            _claims_at_least(p, claimed[k], true[k], f"accounting.cross_check.{k}")


def _check_statements(p: Problems, accountant, data: dict) -> None:
    """What the guarantee covers is what these events cover (never widened), and every standing caveat is kept."""
    g = data.get("guarantee") or {}
    is_data = "data" in data and "model" not in data
    p.check(g.get("covers") == list(accountant.covers), "guarantee.covers",
            f"not what {accountant.name!r} events cover (edited): expected {list(accountant.covers)!r}")
    required = list(NOT_COVERED_DATA if is_data else NOT_COVERED)
    if (data.get("mechanism") or {}).get("public_images") is not None:
        required.append(NOT_COVERED_PUBLIC_IMAGES)
    required += list(accountant.caveats)
    kept = g.get("not_covered") if isinstance(g.get("not_covered"), list) else []
    missing = [s for s in required if s not in kept]
    p.check(not missing, "guarantee.not_covered", f"drops {missing[0]!r}" if missing else "")


def _check_warnings(p: Problems, accountant, data: dict) -> None:
    """Warnings that facts on the card require must be on it (a reader of the Markdown card sees only the warnings)."""
    warnings = data.get("warnings") if isinstance(data.get("warnings"), list) else []
    m = data.get("mechanism") or {}

    def need(condition: bool, prefix: str, why: str) -> None:
        if condition:
            p.check(any(isinstance(w, str) and w.startswith(prefix) for w in warnings), "warnings", f"missing the warning that {why}")

    need(m.get("noise_secret") is False, SEEDED_WARNING[:60], "the noise was seeded (not secret)")
    need(any(e.params.get("sigma") == 0 for e in accountant.events if e.mechanism == "normalised_gaussian_release")
         and accountant.name in ("dpdfd", "dpdfd_per_answer", "dpdfd_disjoint_teachers"),
         NO_NOISE_WARNING[:40], "the noise multiplier is 0 (not private)")
    parity = ((data.get("export") or {}).get("parity") or {})
    weak = isinstance(parity.get("max_abs_diff"), (int, float)) and isinstance(parity.get("top1_agreement"), (int, float)) and (
        parity["max_abs_diff"] > PARITY_MAX_ABS_DIFF or parity["top1_agreement"] < PARITY_MIN_TOP1)
    need(weak, WEAK_PARITY_PREFIX, "the ONNX export disagrees with the trained student")
    delta = (data.get("guarantee") or {}).get("delta")
    need(isinstance(delta, (int, float)) and delta > DELTA_CEILING, LARGE_DELTA_PREFIX, f"δ is above the ceiling {DELTA_CEILING:g}")
    need("empirical" in data, EX_POST_WARNING[:60], "the empirical block was computed on the private records, outside the accounting")


def _check_teacher(p: Problems, accountant, data: dict) -> None:
    """``trained_with_dp`` only beside a ``teacher.guarantee`` whose every field is what ``auditing/teacher_guarantee.py``
    derives from the embedded teacher card (verified again here: ε recomputed, record scope, secret noise), this card's
    own accountant (did the run read private records itself?) and the user's statement; the teacher a kind that can
    carry a card, and its graph the one the teacher card binds."""
    from .teacher_guarantee import KINDS_WITH_CARDS, guarantee_block, run_records_epsilon

    teacher = data.get("teacher")
    if not isinstance(teacher, dict):
        return
    g = teacher.get("guarantee")
    if g is None:
        p.check(teacher.get("trained_with_dp") is None, "teacher.trained_with_dp",
                "set, but the card carries no verified guarantee of the teacher (dpconvert records it only from a verified teacher card)")
        return
    p.check(teacher.get("trained_with_dp") is True, "teacher.trained_with_dp", "must be true beside a teacher.guarantee")
    if not p.check(isinstance(g, dict) and isinstance(g.get("card"), dict), "teacher.guarantee.card", "missing: the teacher's card is the proof"):
        return
    p.check(teacher.get("kind") in KINDS_WITH_CARDS, "teacher.kind",
            f"{teacher.get('kind')!r} cannot carry a privacy card (only {', '.join(KINDS_WITH_CARDS)} teachers can): the guarantee was grafted")
    v1 = data.get("schema_version") == "1.0"
    if not v1:
        p.check(g.get("model_sha256") == teacher.get("graph_sha256"), "teacher.guarantee.model_sha256",
                "is not the teacher's graph hash (teacher.graph_sha256): the guarantee belongs to another model")
    problem = teacher_card_problem(g["card"], g.get("model_sha256"))
    if not p.check(problem is None, "teacher.guarantee.card", f"does not verify: {problem}"):
        return
    delta = float((data.get("guarantee") or {}).get("delta", 0.0))
    reads = run_records_epsilon(accountant, delta)
    if v1:
        _check_teacher_v1(p, g, reads)
        return
    statement = g.get("private_data_is_not_teacher_data") is True
    expected = guarantee_block(g["card"], check_card(g["card"])[0]["epsilon"], run_records_epsilon=reads, run_delta=delta, not_teacher_data=statement)
    for k in sorted(set(g) - set(expected)):
        p.append((f"teacher.guarantee.{k}", "not a field this run's guarantee for the teacher's records has"))
    for k in sorted(set(expected) - set(g)):
        p.append((f"teacher.guarantee.{k}", "missing"))
    for k in sorted(set(g) & set(expected) - {"card"}):
        if k in ("epsilon", "teacher_epsilon", "run_epsilon"):
            _claims_at_least(p, g[k], expected[k], f"teacher.guarantee.{k}")
        elif isinstance(expected[k], float):
            _same(p, g, k, expected[k], "teacher.guarantee")
        else:
            p.check(g[k] == expected[k], f"teacher.guarantee.{k}", f"{g[k]!r}, but the teacher card and this card's events give {expected[k]!r}")


TEACHER_NOTE_V1 = "the student depends on the teacher's private records only through the teacher: post-processing of its guarantee"


def _check_teacher_v1(p: Problems, g: dict, run_records) -> None:
    """A card of schema 1.0 held the teacher's ε alone and a free-text signature: right only when the run read no
    private records itself, and with nothing in it the teacher card does not say."""
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.signing import verify_card

    card = g["card"]
    p.check(run_records is None, "teacher.guarantee.epsilon",
            "the teacher's ε alone, but this run also read private records itself (which may be the teacher's): the two compose; "
            "reconvert with this dpconvert")
    true, _ = check_card(card)
    _claims_at_least(p, g.get("epsilon"), true["epsilon"], "teacher.guarantee.epsilon")
    _same(p, g, "delta", card["guarantee"]["delta"], "teacher.guarantee")
    p.check(g.get("scope") == "record", "teacher.guarantee.scope", "must be record (derived from the teacher card's accountant)")
    for key, value in (("adjacency", card["guarantee"]["adjacency"]), ("accountant", card["accounting"]["accountant"]), ("note", TEACHER_NOTE_V1)):
        if key in g:
            p.check(g[key] == value, f"teacher.guarantee.{key}", f"{g[key]!r}, but the teacher card gives {value!r}")
    if "signature" in g:  # what the conversion saw: "not signed", or the key that signed it (the audit verifies it with its own keys)
        kid = (card.get("signature") or {}).get("key_id") if isinstance(card.get("signature"), dict) else None
        seen = {verify_card(PrivacyCard(card), None)[1]} | ({f"signed by trusted key {kid}"} if kid else set())
        p.check(g["signature"] in seen, "teacher.guarantee.signature", f"{g['signature']!r} is not what the teacher card's signature shows")


def _check_events(p: Problems, accountant, data: dict) -> None:
    num_classes = (data.get("model") or data.get("data") or {}).get("num_classes")
    for i, e in enumerate(accountant.events):
        where = f"accounting.state.events[{i}]"
        p.check(isinstance(e.count, int) and e.count >= 1, f"{where}.count", f"must be a positive integer, got {e.count!r}")
        for k, v in e.params.items():
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            p.check(ok, f"{where}.params.{k}", f"must be a finite number ≥ 0, got {v!r}")
        if "num_classes" in e.params and num_classes is not None:
            p.check(e.params["num_classes"] == num_classes, f"{where}.params.num_classes", f"{e.params['num_classes']} ≠ model.num_classes {num_classes}")


# ------------------------------------------------------------------ per accountant
CHECKS: Registry[Callable] = Registry("card check")


def _check_dpdfd_block(p: Problems, m: dict, events: list, where: str, *, required: set, allowed: set) -> None:
    p.keys(m, where, allowed, required)
    events = _without_prior_trial(p, m, events, where)
    releases = sum(e.count for e in events)
    p.check(releases >= 1, where, "no release events")
    for e in events:
        for key in ("sigma", "clip", "batch_size"):
            _same(p, m, key, e.params.get(key), where)
    if "releases" in m:
        p.check(m["releases"] == releases, f"{where}.releases", f"{m['releases']!r} but the events count {releases} releases")
    noisy = any(e.params.get("sigma", 0) > 0 for e in events)
    if noisy:  # one answer = one row needs distinct inputs in a release (accounting/dpdfd.py)
        p.check(m.get("distinct_inputs") is True, f"{where}.distinct_inputs", "not true: one answer may fill several rows, the ε is understated")
    cfg = m.get("config")
    if isinstance(cfg, dict):
        for key in ("sigma", "clip", "batch_size"):
            for e in events:
                _same(p, cfg, key, e.params.get(key), f"{where}.config")
        if "releases" in cfg:
            p.check(cfg["releases"] == releases, f"{where}.config.releases", f"{cfg['releases']!r} but the events count {releases} releases")


def _without_prior_trial(p: Problems, m: dict, events: list, where: str) -> list:
    """A prior trial (methods/prior_trial.py) is the first release event: one release of `prior_trial.rows` rows at
    the block's σ and C, before the T releases the rest of the block describes. Its rows count in the record-level
    composition like any other (the accountant composes every event); the family it chose is the one whose released
    targets named the most classes. The events after it are returned for the block's own checks."""
    trial = m.get("prior_trial")
    if trial is None:
        return events
    at = f"{where}.prior_trial"
    if not p.check(isinstance(trial, dict), at, "must be an object"):
        return events
    p.keys(trial, at, PRIOR_TRIAL_KEYS, PRIOR_TRIAL_KEYS)
    first = events[0] if events else None
    ok = first is not None and first.count == 1 and first.params.get("batch_size") == trial.get("rows")
    if not p.check(ok, at, f"the first release event is not the trial's one release of {trial.get('rows')!r} rows"):
        return events
    for key in ("sigma", "clip"):
        _same(p, m, key, first.params.get(key), at)
    families, scores, chosen = trial.get("families"), trial.get("effective_classes"), trial.get("chosen")
    ok = isinstance(families, list) and isinstance(scores, list) and len(families) == len(scores) > 0
    if p.check(ok and all(isinstance(v, (int, float)) for v in scores), f"{at}.effective_classes", "must give a number for each family"):
        p.check(chosen in families and scores[families.index(chosen)] == max(scores), f"{at}.chosen",
                f"{chosen!r} is not the family whose released targets named the most classes")
    return events[1:]


def _check_method_name(p: Problems, m: dict, data: dict, name: str, events: str) -> None:
    """mechanism.method names the method whose events these are, as the card's schema version spells it."""
    from dpconvert.zoo_cards.card import card_method_name

    want = card_method_name(name, str(data.get("schema_version")))
    p.check(m.get("method") == want, "mechanism.method", f"{m.get('method')!r} but the events are {events} ({want!r})")


@CHECKS.register("dpdfd")
def _check_dpdfd(p: Problems, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    p.check("query_generator" not in m, "mechanism.query_generator", f"a GAN's cost is not in these events (accountant {accountant.name!r})")
    _check_method_name(p, m, data, "dpdfd", "DPDFD releases")
    _check_dpdfd_block(p, m, accountant.events, "mechanism", required=DPDFD_REQUIRED, allowed=DPDFD_KEYS)
    _check_public_images(p, m, accountant, data)
    _check_teacher_members(p, accountant, data)


def _check_teacher_members(p: Problems, accountant, data: dict) -> None:
    """Several teachers: every release averaged the same n (recorded on each event by the mechanism that averaged them),
    the card lists those n teachers, and a disjoint-partition statement appears exactly where its accountant was used."""
    m, teacher = data.get("mechanism") or {}, data.get("teacher") or {}
    counts = {e.params.get("teachers", 1) for e in accountant.events}
    if not p.check(len(counts) <= 1, "accounting.state.events", f"releases averaged different numbers of teachers {sorted(counts)}"):
        return
    n = counts.pop() if counts else 1
    members = teacher.get("members")
    if n > 1:
        _same(p, m, "teachers", n, "mechanism")
        p.check("teachers" in m, "mechanism.teachers", f"missing: the events average {n} teachers")
        p.check(isinstance(members, list) and len(members) == n, "teacher.members",
                f"lists {len(members) if isinstance(members, list) else 'no'} teachers but the events average {n}")
        p.check(teacher.get("kind") == "ensemble", "teacher.kind", f"{teacher.get('kind')!r}, but the events average {n} teachers (an ensemble)")
        if isinstance(members, list):
            _check_distinct_members(p, members, teacher, data.get("schema_version") != "1.0")
    else:
        p.check("teachers" not in m, "mechanism.teachers", "given, but the events are one teacher's releases")
        p.check(members is None, "teacher.members", "given, but the events are one teacher's releases")
    disjoint = accountant.name == "dpdfd_disjoint_teachers"
    for block, where in ((m, "mechanism"), (teacher, "teacher")):
        p.check(bool(block.get("disjoint_partitions")) == disjoint, f"{where}.disjoint_partitions",
                "must be true with the disjoint-teachers accountant" if disjoint else "true, but the accountant does not use it")
    if disjoint:
        p.check(n >= 2, "accounting.state.events", f"the disjoint-teachers bound needs two teachers or more; the events average {n}")


def _check_distinct_members(p: Problems, members: list, teacher: dict, weights_required: bool) -> None:
    """n teachers are n models: no file hash or weights hash twice (a copy would count one partition's teacher twice,
    and lower the record-level ε it claims), and the ensemble's own hashes are the members' (``io/teacher_set.py``)."""
    import hashlib

    keys = ("sha256", "weights_sha256") if weights_required else ("sha256",)
    for key in keys:
        values = [mb.get(key) if isinstance(mb, dict) else None for mb in members]
        if not p.check(all(isinstance(v, str) for v in values), f"teacher.members.{key}", "missing for a member: the teachers cannot be told apart"):
            continue
        twice = sorted({v for v in values if values.count(v) > 1})
        p.check(not twice, f"teacher.members.{key}", f"{twice[0][:12]}… is listed {values.count(twice[0])} times: one model counted as several teachers"
                if twice else "")
        own = "sha256" if key == "sha256" else "weights_sha256"
        p.check(teacher.get(own) == hashlib.sha256("\n".join(values).encode()).hexdigest(), f"teacher.{own}",
                "is not the hash of the members' hashes (the members were edited)")


@CHECKS.register("dpdfd_per_answer")
def _check_dpdfd_per_answer(p: Problems, accountant, data: dict) -> None:
    """Per-answer accounting holds only for a run that checked, across every release, that no input was answered more
    than ``max_answers_per_input`` times: the mechanism block must say the run checked it, and the same m."""
    _check_dpdfd(p, accountant, data)
    m = data.get("mechanism") or {}
    p.check(m.get("distinct_across_releases") is True, "mechanism.distinct_across_releases",
            "not true: per-answer accounting needs a run that never answered an input twice (use the composed accountant)")
    p.check(m.get("max_answers_per_input") == accountant.max_answers, "mechanism.max_answers_per_input",
            f"{m.get('max_answers_per_input')!r} but the accountant state charges m = {accountant.max_answers}")


@CHECKS.register("dpdfd_disjoint_teachers")
def _check_dpdfd_disjoint(p: Problems, accountant, data: dict) -> None:
    """Record-level through n teachers on disjoint partitions: everything per-answer accounting needs, and the teachers."""
    _check_dpdfd_per_answer(p, accountant, data)


@CHECKS.register("dpdfd_per_answer+dpgan")
def _check_dpdfd_gan_queries(p: Problems, accountant, data: dict) -> None:
    """DPDFD on DP-critic GAN samples: the per-answer DPDFD card for the DPDFD events, the GAN block for the critic's."""
    dpdfd_acc, gan_acc = accountant.parts()
    m = data.get("mechanism") or {}
    _check_dpdfd_per_answer(p, dpdfd_acc, {**data, "mechanism": {k: v for k, v in m.items() if k != "query_generator"}})
    p.check(sum(e.count for e in gan_acc.events) >= 1, "accounting.state.events", "no DP-critic events, but the accountant composes a GAN")
    _check_gan_info(p, m.get("query_generator"), gan_acc, "the events include a DP-critic GAN")


def _check_public_images(p: Problems, m: dict, accountant, data: dict) -> None:
    """Public-image queries: the card must say how many rows one source image filled, and the per-image ε that follows."""
    g = data.get("guarantee") or {}
    images = m.get("public_images")
    if images is None:
        p.check("public images" not in str(m.get("query_source", "")), "mechanism.public_images",
                "missing for public-image queries (how many rows one source image filled: the per-image ε needs it)")
        p.check("per_image_epsilon" not in g, "guarantee.per_image_epsilon", "given without mechanism.public_images")
        return
    rows = images.get("max_rows_per_image") if isinstance(images, dict) else None
    if not p.check(isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1, "mechanism.public_images.max_rows_per_image",
                   f"must be an integer ≥ 1, got {rows!r}"):
        return
    delta = float(g.get("delta", 0.5))
    _claims_at_least(p, g.get("per_image_epsilon"), accountant.per_image_epsilon(delta=delta, max_rows=rows), "guarantee.per_image_epsilon")


def _check_pknn_block(p: Problems, m: dict, events: list, data: dict) -> None:
    p.keys(m, "mechanism", PKNN_KEYS, PKNN_REQUIRED)
    _check_method_name(p, m, data, "pknn", "Private-kNN")
    screening = [e for e in events if e.mechanism == "pknn_screening"]
    argmax = [e for e in events if e.mechanism == "pknn_argmax"]
    asked, answered = sum(e.count for e in screening), sum(e.count for e in argmax)
    p.check(m.get("queries_asked") == asked, "mechanism.queries_asked", f"{m.get('queries_asked')!r} but the events screen {asked} queries")
    p.check(m.get("queries_answered") == answered, "mechanism.queries_answered",
            f"{m.get('queries_answered')!r} but the events answer {answered} queries")
    p.check(answered <= asked, "accounting.state.events", f"{answered} answers for {asked} screened queries")
    for e in screening:
        for key in ("k", "sigma1", "threshold", "sampling_rate"):
            _same(p, m, key, e.params.get(key), "mechanism")
    for e in argmax:
        for key in ("sigma2", "sampling_rate"):
            _same(p, m, key, e.params.get(key), "mechanism")
    cfg = m.get("config")
    if isinstance(cfg, dict):
        for key in ("k", "sampling_rate", "sigma1", "threshold", "sigma2"):
            if key in m:
                _same(p, cfg, key, m[key], "mechanism.config", nullable=key in ("threshold", "sigma2"))  # null: calibrated
        if cfg.get("threshold") is None and cfg.get("threshold_ratio") is not None and "k" in m and "threshold" in m:
            _same(p, {"threshold": cfg["threshold_ratio"] * cfg.get("k", m["k"])}, "threshold", m["threshold"], "mechanism.config.threshold_ratio·k")


@CHECKS.register("pknn")
def _check_pknn(p: Problems, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    _check_pknn_block(p, m, accountant.events, data)
    p.check("query_generator" not in m, "mechanism.query_generator", "a generator's cost is not in these events (accountant 'pknn')")


@CHECKS.register("pknn+dpdfd_generator")
def _check_generator_pknn(p: Problems, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    gen_acc, labels_acc = accountant.parts()
    _check_pknn_block(p, m, labels_acc.events, data)
    info = m.get("query_generator")
    if not p.check(isinstance(info, dict), "mechanism.query_generator", "missing: the composed events include a generator"):
        return
    p.keys(info, "mechanism.query_generator", GENERATOR_KEYS, {"teacher_sha256", "dpdfd", "dpdfd_epsilon_at_its_delta", "its_delta"})
    teacher_sha = (data.get("teacher") or {}).get("sha256")
    p.check(teacher_sha is not None and info.get("teacher_sha256") == teacher_sha, "mechanism.query_generator.teacher_sha256",
            "the generator's cost was paid against another teacher (or none is named)")
    if info.get("file") is not None:
        p.check(isinstance(info.get("file_sha256"), str), "mechanism.query_generator.file_sha256", "missing for a saved generator file")
    block = info.get("dpdfd")
    if p.check(isinstance(block, dict), "mechanism.query_generator.dpdfd", "missing"):
        _check_dpdfd_block(p, block, gen_acc.events, "mechanism.query_generator.dpdfd", required=GENERATOR_DPDFD_KEYS, allowed=GENERATOR_DPDFD_KEYS)
    try:
        its_delta = float(info.get("its_delta"))
        _claims_at_least(p, info.get("dpdfd_epsilon_at_its_delta"), gen_acc.epsilon(delta=its_delta), "mechanism.query_generator.dpdfd_epsilon_at_its_delta")
    except (TypeError, ValueError):
        p.append(("mechanism.query_generator.its_delta", "not a number"))


@CHECKS.register("dpsgd")
def _check_dpsgd(p: Problems, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    p.keys(m, "mechanism", DPSGD_KEYS, DPSGD_REQUIRED)
    _check_method_name(p, m, data, "dpsgd", "DP-SGD steps")
    counts = [e for e in accountant.events if e.mechanism == "gaussian_count"]
    _check_noisy_steps(p, m, [e for e in accountant.events if e.mechanism == "subsampled_gaussian"], "mechanism")
    p.check(sum(e.count for e in counts) == 1, "accounting.state.events", "DP-SGD draws exactly one noisy record count")
    for e in counts:
        _same(p, m, "count_sigma", e.params.get("sigma"), "mechanism")
    cfg = m.get("config")
    if isinstance(cfg, dict):
        for key in ("sigma", "clip", "sampling_rate", "count_sigma"):
            if key in m:
                _same(p, cfg, key, m[key], "mechanism.config", nullable=key == "sigma")  # null: calibrated
        if isinstance(cfg.get("epochs"), int) and isinstance(cfg.get("sampling_rate"), (int, float)) and cfg["sampling_rate"] > 0:
            p.check(m.get("steps") == cfg["epochs"] * int(1 / cfg["sampling_rate"]), "mechanism.config.epochs",
                    "epochs·⌊1/q⌋ differs from the steps the events hold")


@CHECKS.register("laplace")
def _check_adlm(p: Problems, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    p.keys(m, "mechanism", ADLM_KEYS, ADLM_REQUIRED)
    _check_method_name(p, m, data, "adlm", "the Adaptive Laplace Mechanism's")
    scales = [e.params.get("scale") for e in accountant.events for _ in range(e.count)]
    p.check(len(scales) == 2 and all(e.params.get("l1_sensitivity") == 1.0 for e in accountant.events), "accounting.state.events",
            "AdLM makes exactly two Laplace releases of sensitivity 1")
    if len(scales) == 2:
        _same(p, m, "epsilon_relevance", 1.0 / scales[0], "mechanism")
        _same(p, m, "epsilon_coefficients", 1.0 / scales[1], "mechanism")
    cfg = m.get("config")
    if isinstance(cfg, dict) and isinstance(cfg.get("relevance_share"), (int, float)) and len(scales) == 2:
        share = (1.0 / scales[0]) / (1.0 / scales[0] + 1.0 / scales[1])
        _same(p, cfg, "relevance_share", share, "mechanism.config")
        _same(p, cfg, "relevance_power", m.get("relevance_power"), "mechanism.config")


DPGAN_INFO_KEYS = {"trained_in_this_run", "architecture", "samples", "dpgan_epsilon_at_its_delta", "its_delta", "dpgan"}
DPGAN_KEYS = {"sigma", "clip", "sampling_rate", "steps", "fake_batch", "engine"} | NOISE_KEYS
DPGAN_OPTIONAL_KEYS = {"critic", "features", "length_scale", "generator_steps"}  # the critic kind (absent: dpsgd, older cards)


@CHECKS.register("dpgan")
def _check_dpgan_data(p: Problems, accountant, data: dict) -> None:
    """A synthetic data set's card (``dpconvert synth``): the GAN block is the mechanism block."""
    m = data.get("mechanism") or {}
    p.keys(m, "mechanism", DPGAN_KEYS | DPGAN_OPTIONAL_KEYS | {"method", "config"}, DPGAN_KEYS | {"method", "config"})
    _check_method_name(p, m, data, "dpgan", "DP-critic GAN steps")
    _check_noisy_steps(p, m, accountant.events, "mechanism")
    _check_critic(p, m, accountant.events, "mechanism")


def _check_critic(p: Problems, block: dict, events: list, where: str) -> None:
    """The embedding critic is one Gaussian release of unit-norm per-record vectors: a card that replays it as a
    subsampled or larger-clip event would understate ε."""
    critic = block.get("critic", "dpsgd")
    if not p.check(critic in ("dpsgd", "embedding"), f"{where}.critic", f"{critic!r} is not a critic this dpconvert knows"):
        return
    if critic == "embedding":
        p.check(all(e.params.get("sampling_rate") == 1.0 and e.params.get("clip") == 1.0 for e in events) and sum(e.count for e in events) == 1,
                "accounting.state.events", "the embedding critic is one Gaussian release with sampling_rate 1 and sensitivity (clip) 1")


def _check_noisy_steps(p: Problems, block: dict, events: list, where: str) -> None:
    """A block of Poisson-subsampled Gaussian steps (DP-SGD, the DP critic): its steps, σ, C and q against the events."""
    steps = sum(e.count for e in events)
    p.check(block.get("steps") == steps, f"{where}.steps", f"{block.get('steps')!r} but the events hold {steps} noisy steps")
    for e in events:
        for key in ("sigma", "clip", "sampling_rate"):
            _same(p, block, key, e.params.get(key), where)


@CHECKS.register("pknn+dpgan")
def _check_dpgan_pknn(p: Problems, accountant, data: dict) -> None:
    m = data.get("mechanism") or {}
    gan_acc, labels_acc = accountant.parts()
    _check_pknn_block(p, m, labels_acc.events, data)
    _check_gan_info(p, m.get("query_generator"), gan_acc, "the composed events include a DP-critic GAN")


def _check_gan_info(p: Problems, info, gan_acc, why: str) -> None:
    """The query generator block of a DP-critic GAN trained in the run: its critic against the GAN's events."""
    if not p.check(isinstance(info, dict), "mechanism.query_generator", f"missing: {why}"):
        return
    p.keys(info, "mechanism.query_generator", DPGAN_INFO_KEYS, DPGAN_INFO_KEYS)
    block = info.get("dpgan")
    if p.check(isinstance(block, dict), "mechanism.query_generator.dpgan", "missing"):
        p.keys(block, "mechanism.query_generator.dpgan", DPGAN_KEYS | DPGAN_OPTIONAL_KEYS, DPGAN_KEYS)
        _check_noisy_steps(p, block, gan_acc.events, "mechanism.query_generator.dpgan")
        _check_critic(p, block, gan_acc.events, "mechanism.query_generator.dpgan")
    try:
        its_delta = float(info.get("its_delta"))
        _claims_at_least(p, info.get("dpgan_epsilon_at_its_delta"), gan_acc.epsilon(delta=its_delta), "mechanism.query_generator.dpgan_epsilon_at_its_delta")
    except (TypeError, ValueError):
        p.append(("mechanism.query_generator.its_delta", "not a number"))


def _check_noise_claims(p: Problems, data: dict) -> None:
    """A block that says its noise was secret must not describe a seeded stream."""
    for where, m in noise_blocks(data):
        if m.get("noise_secret") is True:
            rng = str(m.get("noise_rng", "")).lower()
            p.check("seeded with" not in rng and "seeded-noise" not in rng and "seeded_noise" not in rng, f"{where}.noise_secret",
                    "true, but noise_rng describes a seeded stream")


def verify_teacher_card(data: dict, graph_sha256: Optional[str], trusted: Optional[dict] = None) -> tuple[dict, float]:
    """(the teacher card, its recomputed ε) once it verifies for the teacher whose graph hashes to ``graph_sha256`` (and,
    with ``trusted`` keys, carries a valid signature by one of them), or a ``DpconvertError`` that says why not."""
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.signing import verify_card

    problem = teacher_card_problem(data, graph_sha256)
    if problem:
        raise DpconvertError(f"the teacher's privacy card cannot be passed on: {problem}")
    status, detail = verify_card(PrivacyCard(data), trusted)
    if trusted is not None and status != "valid":
        raise DpconvertError(f"the teacher's privacy card cannot be passed on: {detail}")
    return data, float(check_card(data)[0]["epsilon"])


def teacher_card_problem(data: dict, graph_sha256: Optional[str]) -> Optional[str]:
    """None when ``data`` is a teacher card whose record-level guarantee can be passed on (``teacher_guarantee.py``), else
    why not (one line): consistent with its events, record-level, finite ε, secret noise, δ within the ceiling, and the
    model hash it was verified against."""
    from dpconvert.zoo_cards import PrivacyCard

    try:
        card = PrivacyCard(data).validate("teacher card")
    except DpconvertError as e:
        return str(e)
    if card.kind != "model":
        return "it is a data set's card, not a model's"
    true, problems = check_card(card.data)
    if problems:
        return f"{problems[0][0]}: {problems[0][1]}"
    if true["scope"] != "record":
        return f"its accountant proves a {true['scope']}-level guarantee; only a record-level one passes to a student"
    if not math.isfinite(true["epsilon"]):
        return "its ε is infinite"
    if any(m.get("noise_secret") is not True for _, m in noise_blocks(card.data)):
        return "its noise was not secret (seeded)"
    if card.delta > DELTA_CEILING:
        return f"its δ = {card.delta:g} is above the ceiling {DELTA_CEILING:g}"
    if graph_sha256 is not None and card.model_sha256 != graph_sha256:
        return "the teacher's weights do not match its card's model hash (the file changed after its card was written)"
    return None


def noise_blocks(data: dict) -> list[tuple[str, dict]]:
    """(where, block) of every mechanism whose noise the card's ε relies on."""
    m = data.get("mechanism") or {}
    out = [("mechanism", m)]
    for kind in ("dpdfd", "dpgan"):
        inner = (m.get("query_generator") or {}).get(kind)
        if isinstance(inner, dict):
            out.append((f"mechanism.query_generator.{kind}", inner))
    return out
