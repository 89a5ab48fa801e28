"""Registry contracts (like timm's tests over ``list_models()``): every registered accountant and every Private-kNN
query source keeps the promises the card and the audit rely on. A new entry without a case here fails the first test
of its registry."""

from __future__ import annotations

import math

import pytest

from dpconvert.accounting import ACCOUNTANTS
from dpconvert.errors import DpconvertError

DELTA = 1e-5
_DPDFD = [("normalised_gaussian_release", dict(sigma=4.0, clip=1.0, batch_size=1000), 3)]
_PKNN = [("pknn_screening", dict(k=100, num_classes=10, sigma1=40.0, threshold=40.0, sampling_rate=0.2), 500),
         ("pknn_argmax", dict(sigma2=20.0, sampling_rate=0.2, num_classes=10), 300)]
_SGD = [("subsampled_gaussian", dict(sigma=1.2, clip=1.0, sampling_rate=0.05), 200)]
# accountant → events it can hold: (mechanism, params, count); the first parameter named in NOISE is its noise level
CASES = {
    "dpdfd": _DPDFD,
    "dpdfd_per_answer": _DPDFD,
    "dpdfd_disjoint_teachers": [("normalised_gaussian_release", dict(sigma=4.0, clip=1.0, batch_size=1000, teachers=250), 3)],
    "pknn": _PKNN,
    "pknn+dpdfd_generator": _DPDFD + _PKNN,
    "dpsgd": [("gaussian_count", dict(sigma=50.0), 1)] + _SGD,
    "laplace": [("laplace", dict(scale=4.0, l1_sensitivity=1.0), 2)],
    "dpgan": _SGD,
    "pknn+dpgan": _SGD + _PKNN,
    "dpdfd_per_answer+dpgan": _SGD + _DPDFD,
}
NOISE = ("sigma", "sigma1", "sigma2", "scale")


def _accountant(name: str, scale: float = 1.0):
    """The case's accountant with every noise parameter multiplied by ``scale``."""
    acc = ACCOUNTANTS.get(name)()
    for mechanism, params, count in CASES[name]:
        acc.record(mechanism, count=count, **{k: v * scale if k in NOISE else v for k, v in params.items()})
    return acc


def test_every_registered_accountant_has_a_case():
    assert sorted(CASES) == sorted(ACCOUNTANTS.names())


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_accountant_replays_from_its_card_state(name):
    """``state_dict`` → ``load_state_dict`` gives the same ε by every bound (what ``dpconvert audit`` recomputes)."""
    acc = _accountant(name)
    replayed = ACCOUNTANTS.get(name)().load_state_dict(acc.state_dict())
    assert replayed.epsilons(delta=DELTA) == acc.epsilons(delta=DELTA)
    assert replayed.record_level_epsilon(delta=DELTA) == acc.record_level_epsilon(delta=DELTA)
    assert acc.scope in ("record", "query") and acc.adjacency


@pytest.mark.parametrize("name", sorted(CASES))
def test_less_noise_never_gives_a_smaller_epsilon(name):
    """Halving every noise parameter raises ε (a card whose noise was edited down cannot keep its ε); doubling lowers it.
    The record-level worst case is never below the headline ε."""
    eps = {s: _accountant(name, s).epsilon(delta=DELTA) for s in (0.5, 1.0, 2.0)}
    assert eps[0.5] > eps[1.0] > eps[2.0] > 0
    assert _accountant(name).record_level_epsilon(delta=DELTA) >= eps[1.0] * (1 - 1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_accountant_refuses_events_it_cannot_account_for(name):
    foreign = next(m for m in ("laplace", "pknn_argmax", "normalised_gaussian_release") if m not in ACCOUNTANTS.get(name).mechanisms)
    with pytest.raises(ValueError, match="cannot account for"):
        ACCOUNTANTS.get(name)().record(foreign, sigma=1.0)
    state = _accountant(name).state_dict()
    state["events"].append({"mechanism": foreign, "params": {}, "count": 1})
    with pytest.raises(DpconvertError, match="cannot replay"):
        ACCOUNTANTS.get(name)().load_state_dict(state)
    with pytest.raises(DpconvertError, match="accountant state is for"):
        ACCOUNTANTS.get(name)().load_state_dict({**state, "accountant": "something else"})


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cross_check_agrees_with_the_reported_epsilon(name):
    """Where an accountant has an independent library's cross-check (the card's accounting.cross_check), PLD agrees
    with the reported ε and RDP is never below it (a looser, still valid bound)."""
    acc = _accountant(name)
    cross = acc.cross_check(delta=DELTA)
    if cross is None:
        pytest.skip(f"{name} has no cross-check")
    eps = acc.epsilon(delta=DELTA)
    assert math.isclose(cross["pld"], eps, rel_tol=2e-2) and cross["rdp"] >= eps * (1 - 1e-3)


# ------------------------------------------------------------------ Private-kNN's query sources
# how each kind of source is chosen (``QuerySourceKind.chosen_by``; a named one: `query_generator` NAME), and what makes
# the in-run generators quick here (a source without an entry runs with its defaults)
CHOOSE = {"public_data": dict(public_data="builtin:digits"), "file": dict(query_generator="{saved}", queries=200)}
QUICK = {"train": dict(releases=2, batch_size=2000), "dpgan": dict(gan_generator_steps=20)}


def source_options(name: str) -> dict:
    """The Private-kNN options that choose registered source ``name`` (besides the private data)."""
    from dpconvert.methods.query_sources import QUERY_SOURCES

    kind = QUERY_SOURCES.get(name)
    return {**CHOOSE.get(kind.chosen_by, dict(query_generator=name, queries=200)), **QUICK.get(name, {})}


def _registered_sources() -> list:
    from dpconvert.methods.query_sources import QUERY_SOURCES

    return QUERY_SOURCES.names()


@pytest.fixture(scope="module")
def saved_generator(tmp_path_factory):
    """A DPDFD generator saved with its cost (the `saved` source's input)."""
    import dpconvert

    d = tmp_path_factory.mktemp("gen")
    dpconvert.convert("builtin:digits", out=d / "s.onnx", method="dpdfd", eps=1, generator="dafl", releases=2, batch_size=2000, epochs=1,
                      save_generator=str(d / "g.safetensors"))
    return d / "g.safetensors"


def check_query_source(source: str, tmp_path, saved_generator=None) -> dict:
    """Source ``source``, chosen by its options, labels its queries within the target ε, composes any cost it carries
    into the card's accountant (and only then names a query generator), plans what it runs, and its card passes the
    audit (and fails it with σ2 halved). Returns the card."""
    import json

    import dpconvert
    from dpconvert.auditing.card_checks import check_card
    from dpconvert.methods.query_sources import QUERY_SOURCES

    options = {k: (v.format(saved=saved_generator) if isinstance(v, str) else v) for k, v in source_options(source).items()}
    labels = dict(method="pknn", eps=8.0, k=40, sampling_rate=0.3, sigma1=20)
    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", private_data="builtin:digits:train", rounds=1, epochs=1, **labels,
                          **options)
    card = r.card.data
    assert card["guarantee"]["epsilon"] <= 8.0 * (1 + 1e-9)
    composed = QUERY_SOURCES.get(source).composed_accountant is not None
    assert (card["accounting"]["accountant"] != "pknn") == composed  # a generator's cost is composed into the labels'
    assert ("query_generator" in card["mechanism"]) == composed
    if QUERY_SOURCES.get(source).free:  # a free source's plan is the labels' alone: what `dpconvert plan` prints is what ran
        plan = dpconvert.plan(**labels, input_size=(1, 8, 8), queries=card["mechanism"]["queries_asked"])
        assert plan.sigma2 == card["mechanism"]["sigma2"] and plan.queries_asked == card["mechanism"]["queries_asked"]
    assert [m.passed for m in dpconvert.audit([str(r.out)])] == [True]
    edited = json.loads(json.dumps(card))
    edited["mechanism"]["sigma2"] /= 2
    assert check_card(edited)[1], f"{source}: halving mechanism.sigma2 went unnoticed"
    return card


@pytest.mark.slow
@pytest.mark.parametrize("source", _registered_sources())
def test_every_query_source_runs_records_its_cost_and_passes_the_audit(source, tmp_path, saved_generator):
    check_query_source(source, tmp_path, saved_generator)
