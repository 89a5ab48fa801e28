"""What a card's descriptive fields say is backed by its accountant ("The card must never lie, round 3", item 4): one
forged card per row of ``card_checks.DESCRIPTIONS``, and a query generator's ε stated at its own δ share."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dpconvert.auditing.card_checks import DESCRIPTIONS, ITS_DELTA_SHARE, check_card, recompute

CARDS = Path(__file__).parent / "fixtures" / "previous_release"


def _load(name: str) -> dict:
    return json.loads((CARDS / f"{name}.card.json").read_text())


def _fields(card: dict) -> set:
    return {w for w, _ in check_card(card)[1]}


def _replay(c: dict) -> None:
    """Make the forged card's numbers what its (edited) events give, as a careful forger would."""
    c["accounting"]["epsilons"], c["accounting"].pop("cross_check", None)
    true = recompute(c)[1]
    c["guarantee"]["epsilon"], c["guarantee"]["record_level_epsilon"] = true["epsilon"], true["record_level_epsilon"]


def _drop_gan(c: dict) -> None:
    """DPDFD on DP-critic GAN samples, the GAN's whole part removed: accountant, events, block and its scope."""
    c["accounting"]["accountant"] = c["accounting"]["state"]["accountant"] = "dpdfd_per_answer"
    c["accounting"]["state"]["events"] = [e for e in c["accounting"]["state"]["events"] if e["mechanism"] == "normalised_gaussian_release"]
    c["mechanism"].pop("query_generator")
    c["guarantee"].pop("queries_record_level_epsilon")
    c["guarantee"]["not_covered"] = [s for s in c["guarantee"]["not_covered"] if "GAN" not in s]
    c["guarantee"]["adjacency"] = recompute(c)[0].adjacency
    _replay(c)


def _drop_generator(c: dict) -> None:
    """Private-kNN on a DPDFD generator's queries, the generator's cost removed."""
    c["accounting"]["accountant"] = c["accounting"]["state"]["accountant"] = "pknn"
    c["accounting"]["state"]["events"] = [e for e in c["accounting"]["state"]["events"] if e["mechanism"].startswith("pknn")]
    c["mechanism"].pop("query_generator")
    acc = recompute(c)[0]
    c["guarantee"]["scope"], c["guarantee"]["adjacency"] = acc.scope, acc.adjacency
    _replay(c)


def _claim_disjoint(c: dict) -> None:
    c["mechanism"]["method_choice"] = "3 teachers on disjoint partitions of the private data: record-level"


ROWS = {  # the table's rows, each with a card whose words stay and whose accounting goes
    ("mechanism.query_source", "gan with a dp critic"): ("dpdfd_dpgan", _drop_gan),
    ("mechanism.query_source", "dp-critic gan"): ("dpdfd_dpgan", lambda c: (_drop_gan(c), c["mechanism"].update(
        query_source="DP-critic GAN trained on the private data in this run (200 samples)"))),
    ("mechanism.method_choice", "dp-critic gan"): ("dpdfd_dpgan", _drop_gan),
    ("mechanism.query_source", "dpdfd generator"): ("generator_pknn", _drop_generator),
    ("mechanism.method_choice", "disjoint partitions"): ("dpdfd", _claim_disjoint),
}


def test_every_row_of_the_table_has_a_forged_card():
    assert {(f, phrase) for f, phrase, _, _ in DESCRIPTIONS} == set(ROWS)


@pytest.mark.parametrize("row", sorted(ROWS), ids=lambda r: f"{r[0]}~{r[1]}")
def test_words_without_their_accounting_fail_on_the_field(row):
    name, forge = ROWS[row]
    genuine = _load(name)
    assert not _fields(genuine)
    forged = copy.deepcopy(genuine)
    forge(forged)
    fields = _fields(forged)
    assert row[0] in fields, fields


def test_dropping_the_gan_lowers_the_worst_case_and_is_caught():
    forged = copy.deepcopy(_load("dpdfd_dpgan"))
    before = forged["guarantee"]["record_level_epsilon"]
    _drop_gan(forged)
    assert forged["guarantee"]["record_level_epsilon"] < before  # what the forger gains
    assert {"mechanism.query_source", "mechanism.method_choice"} <= _fields(forged)


@pytest.mark.parametrize("name", ["dpdfd_dpgan", "generator_pknn"])
def test_a_query_generators_delta_is_its_share(name):
    card = _load(name)
    share = ITS_DELTA_SHARE[card["accounting"]["accountant"]]
    assert card["mechanism"]["query_generator"]["its_delta"] == pytest.approx(share * card["guarantee"]["delta"])
    forged = copy.deepcopy(card)
    forged["mechanism"]["query_generator"]["its_delta"] = 0.5
    key = "dpgan_epsilon_at_its_delta" if "dpgan" in card["mechanism"]["query_generator"] else "dpdfd_epsilon_at_its_delta"
    forged["mechanism"]["query_generator"][key] = 0.01  # what a δ of 0.5 would let it claim
    assert "mechanism.query_generator.its_delta" in _fields(forged)


@pytest.mark.parametrize("value", ["x", 7, "false"])
def test_whether_the_generator_was_trained_here_is_a_boolean(value):
    """It decides the δ its ε is read at; a fuzzed card with "x" or 7 there passed the audit as if it said true."""
    forged = copy.deepcopy(_load("generator_pknn"))
    forged["mechanism"]["query_generator"]["trained_in_this_run"] = value
    assert "mechanism.query_generator.trained_in_this_run" in _fields(forged)
