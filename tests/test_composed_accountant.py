"""The composed accountant (``accounting/composed.py``): compositions are declared, not written as classes, and they
give exactly what the hand-written pair classes they replaced gave, on the contract cases and on cards those classes
wrote (``fixtures/before_composed``: written by the code before the change)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpconvert.accounting import ACCOUNTANTS, Composition, DpganAccountant, LaplaceAccountant, PknnAccountant, compose
from dpconvert.accounting.accountant import GUARANTEE_QUESTIONS
from dpconvert.accounting.statements import COVERS_STUDENT
from dpconvert.errors import DpconvertError
from dpconvert.registry import Registry
from tests.test_registry_contracts import DELTA, _accountant

BEFORE = Path(__file__).parent / "fixtures" / "before_composed"
ANSWERS = json.loads((BEFORE / "accountant_answers.json").read_text())
QUESTIONS = ("record_level_epsilon", *GUARANTEE_QUESTIONS, "private_records_epsilon")


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_every_accountant_answers_what_it_answered_before(name):
    """Each question's value (or None: not applicable), each bound the card's accounting.epsilons listed, the
    cross-check and the per-image ε, to 1e-9 relative: a drift in any accountant's arithmetic fails here (1e-12 was
    tighter than the numerical libraries keep: a dependency update moved one record-level ε by 1.3e-12 relative)."""
    before, acc = ANSWERS[name], _accountant(name)
    assert (acc.scope, acc.adjacency) == (before["scope"], before["adjacency"])
    got = acc.epsilons(delta=DELTA)
    for key, value in before["epsilons"].items():  # a new card may list more bounds, never fewer
        assert got[key] == pytest.approx(value, rel=1e-9), key
    for q in QUESTIONS:
        value = getattr(acc, q)(delta=DELTA)
        assert (value is None) == (before[q] is None), q
        if value is not None:
            assert value == pytest.approx(before[q], rel=1e-9), q
    per_image = acc.per_image_epsilon(delta=DELTA, max_rows=50)
    assert per_image == (None if before["per_image_epsilon"] is None else pytest.approx(before["per_image_epsilon"], rel=1e-9))
    cross = acc.cross_check(delta=DELTA)
    assert (cross is None) == (before["cross_check"] is None)
    for key, value in (before["cross_check"] or {}).items():
        assert cross[key] == pytest.approx(value, rel=1e-9), key


@pytest.mark.parametrize("name", ["pknn_dpgan", "dpdfd_dpgan"])
def test_cards_the_pair_classes_wrote_still_audit_and_render_the_same(name):
    from dpconvert.auditing.card_checks import check_card
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.markdown import render_markdown

    data = json.loads((BEFORE / f"{name}.card.json").read_text())
    true, problems = check_card(data)
    assert problems == [] and true["epsilon"] <= data["guarantee"]["epsilon"] * (1 + 1e-9)
    assert render_markdown(PrivacyCard(data)) == (BEFORE / f"{name}.card.md").read_text()


def _laplace_then_gan(registry):
    """A composition none of the product's methods uses: Laplace releases, then a DP-critic GAN on the same records."""
    return compose("laplace+dpgan", Composition(parts=(("laplace", LaplaceAccountant), ("dpgan", DpganAccountant)), answers={
        "epsilon": (("laplace", "epsilon"), ("dpgan", "epsilon")),
        "private_records_epsilon": (("laplace", "epsilon"), ("dpgan", "epsilon")),
    }), scope="record", adjacency="add/remove one private record", covers=COVERS_STUDENT, doc="test", registry=registry)


def test_a_new_composition_is_one_declaration():
    registry = Registry("accountant")
    cls = _laplace_then_gan(registry)
    assert registry.get("laplace+dpgan") is cls and "laplace+dpgan" not in ACCOUNTANTS
    acc = cls()
    acc.record("laplace", scale=4.0, l1_sensitivity=1.0)
    acc.record("subsampled_gaussian", count=200, sigma=1.2, clip=1.0, sampling_rate=0.05)
    laplace, gan = acc.parts()
    eps = acc.epsilons(delta=DELTA)
    assert eps["epsilon"] == eps["basic_composition_half_delta_each"] == pytest.approx(0.25 + gan.epsilon(delta=DELTA / 2), rel=1e-9)
    assert acc.record_level_epsilon(delta=DELTA) == acc.private_records_epsilon(delta=DELTA) == eps["epsilon"]  # record-level headline
    assert acc.replace_one_epsilon(delta=DELTA) is None and acc.per_image_epsilon(delta=DELTA, max_rows=3) is None
    assert acc.guarantee_keys() == () and acc.cross_check(delta=DELTA) is None and acc.covers == tuple(COVERS_STUDENT)
    replayed = cls().load_state_dict(acc.state_dict())
    assert replayed.epsilons(delta=DELTA) == eps
    with pytest.raises(ValueError, match="cannot account for"):
        acc.record("pknn_argmax", sigma2=1.0, sampling_rate=0.1, num_classes=10)


def test_a_composition_refuses_parts_that_share_a_mechanism_or_more_than_two_terms():
    from dpconvert.accounting import DpsgdAccountant

    with pytest.raises(ValueError, match="same mechanism"):
        compose("x", Composition(parts=(("a", DpsgdAccountant), ("b", DpganAccountant)), answers={"epsilon": (("a", "epsilon"),)}),
                scope="record", adjacency="-", covers=COVERS_STUDENT, doc="", registry=Registry("accountant"))
    three = (("a", "epsilon"), ("b", "epsilon"), ("a", "epsilon"))
    with pytest.raises(ValueError, match="two terms"):
        compose("y", Composition(parts=(("a", LaplaceAccountant), ("b", PknnAccountant)), answers={"epsilon": three}),
                scope="record", adjacency="-", covers=COVERS_STUDENT, doc="", registry=Registry("accountant"))


def test_a_composed_state_must_carry_its_parts_settings():
    """dpdfd_per_answer+dpgan carries its DPDFD part's max_answers_per_input: dropped or invalid, the card is refused."""
    state = _accountant("dpdfd_per_answer+dpgan").state_dict()
    assert state["max_answers_per_input"] == 1
    for broken in ({k: v for k, v in state.items() if k != "max_answers_per_input"}, {**state, "max_answers_per_input": 0}):
        with pytest.raises(DpconvertError):
            ACCOUNTANTS.get("dpdfd_per_answer+dpgan")().load_state_dict(broken)
    m3 = ACCOUNTANTS.get("dpdfd_per_answer+dpgan")().load_state_dict({**state, "max_answers_per_input": 3})
    assert m3.parts()[0].max_answers == 3 and m3.epsilon(delta=DELTA) > _accountant("dpdfd_per_answer+dpgan").epsilon(delta=DELTA)
    assert math.isclose(m3.epsilon(delta=DELTA), m3.parts()[0].epsilon(delta=DELTA))
