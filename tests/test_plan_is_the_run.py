"""A registry contract, like timm's tests over ``list_models()``: for every registered method, ``dpconvert.plan``
plans exactly the noise, the steps and the δ that ``dpconvert.convert`` then runs with the same options."""

from __future__ import annotations

import json

import pytest

import dpconvert
from dpconvert.methods import METHODS

PRIVATE = dict(private_data="builtin:digits:train")
# method → (what convert is given besides the teacher, the method options both get); which plan fields the card must
# carry is the plan's own declaration (``Plan.card_keys``)
CASES = {
    "dpdfd": ({}, dict(batch_size=20_000, releases=2, epochs=1)),
    "pknn": (dict(**PRIVATE, public_data="builtin:digits"), dict(k=40, sampling_rate=0.3, sigma1=20, epochs=1)),
    "dpsgd": (PRIVATE, dict(epochs=1)),
    "adlm": (PRIVATE, {}),
}
EPS = {"pknn": 8.0}  # the tiny digits set needs a larger ε for Private-kNN to answer anything
PUBLIC_DIGITS = 450  # builtin:digits (the test split): Private-kNN's queries, one per public image


def test_every_registered_method_has_a_case():
    assert sorted(CASES) == METHODS.names()


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(CASES))
def test_plan_plans_what_convert_runs(method, tmp_path):
    given, options = CASES[method]
    check_plan_is_the_run(method, given, options, EPS.get(method, 1.0), tmp_path, queries=PUBLIC_DIGITS if method == "pknn" else None)


def check_plan_is_the_run(method: str, given: dict, options: dict, eps: float, tmp_path, queries=None) -> None:
    """`dpconvert.plan` plans what `convert` runs (every field the plan declares in ``card_keys``, δ, ε ≥ the realised
    ε); the card passes the audit, and fails it with its first declared noise parameter halved."""
    r = dpconvert.convert("builtin:digits", out=tmp_path / "s.onnx", method=method, eps=eps, **given, **options)
    card = r.card.data
    plan = dpconvert.plan(method, eps=eps, input_size=(1, 8, 8), queries=queries, **options)
    pairs = list(plan.card_keys.items())
    assert pairs, f"{method}: its plan declares no card_keys"
    for plan_key, card_key in pairs:
        assert getattr(plan, plan_key) == card["mechanism"][card_key], (plan_key, getattr(plan, plan_key), card["mechanism"][card_key])
    assert plan.delta == card["guarantee"]["delta"]
    assert card["guarantee"]["epsilon"] <= plan.epsilon * (1 + 1e-9)  # realised ≤ planned (Private-kNN answers fewer)

    # the card passes the audit, and the same card with its first noise parameter halved fails it
    from dpconvert.auditing.card_checks import check_card

    assert [m.passed for m in dpconvert.audit([str(r.out)])] == [True]
    forged = json.loads(json.dumps(card))
    forged["mechanism"][pairs[0][1]] /= 2
    assert check_card(forged)[1], f"{method}: halving mechanism.{pairs[0][1]} went unnoticed"


@pytest.mark.parametrize("name", __import__("dpconvert.students", fromlist=["STUDENTS"]).STUDENTS.names())
def test_every_registered_student_builds_answers_and_has_a_classifier(name):
    """Every student in the registry, for the two input sizes the defaults use: logits of the right shape and a last
    Linear layer (DPDFD zeroes it; the logit adjustment shifts its bias)."""
    import torch

    from dpconvert.distill.models import classifier
    from dpconvert.io.spec import InputSpec
    from dpconvert.students import create_student

    for spec in (InputSpec(1, 8, 8, 10), InputSpec(1, 28, 28, 10)):
        student = create_student(name, spec).eval()
        with torch.no_grad():
            assert student(torch.rand(3, *spec.shape)).shape == (3, 10)
        assert classifier(student).out_features == 10


def test_plan_refuses_what_convert_refuses():
    with pytest.raises(dpconvert.DpconvertError, match="`noise_multiplier` is the σ of DPDFD and DP-SGD"):
        dpconvert.plan("pknn", noise_multiplier=3)
    with pytest.raises(dpconvert.DpconvertError, match="`releases` is not an option of method 'dpsgd'"):
        dpconvert.plan("dpsgd", releases=3)
    with pytest.raises(dpconvert.DpconvertError, match="unknown method 'pate'"):
        dpconvert.plan("pate")


@pytest.mark.slow
def test_every_methods_spent_epsilon_is_checked_once_and_the_card_says_it():
    """``accounting/card_blocks.check_spent``: the ε the recorded events give when replayed (as the audit does) must be
    the live accountant's and within the target; the card's guarantee block states exactly that ε."""
    from dpconvert.accounting import ACCOUNTANTS
    from dpconvert.accounting.card_blocks import Claims, accounting_block, check_spent, guarantee_block

    acc = ACCOUNTANTS.get("dpsgd")()
    acc.record("subsampled_gaussian", sigma=1.0, clip=1.0, sampling_rate=0.01, count=100)
    eps = acc.epsilon(delta=1e-5)
    assert check_spent(acc, delta=1e-5, target=eps * 1.01) == eps
    claims = Claims(covers=["the student"], not_covered=[], calibrated=False, target_epsilon=None)
    assert guarantee_block(acc, 1e-5, claims)["epsilon"] == eps
    assert accounting_block(acc, 1e-5, claims)["state"] == acc.state_dict()
    from dpconvert.errors import InternalError

    with pytest.raises(InternalError, match="exceeds the target"):  # a bug, not bad input: not a DpconvertError
        check_spent(acc, delta=1e-5, target=eps * 0.99)
    with pytest.raises(InternalError) as raised:
        check_spent(acc, delta=1e-5, target=eps * 0.99)

    class Forgetful(type(acc)):  # a mechanism whose card would not record everything it spent
        def state_dict(self):
            return {**super().state_dict(), "events": super().state_dict()["events"][:1]}

    forgetful = Forgetful(events=list(acc.events))
    forgetful.record("gaussian_count", sigma=0.5)
    assert not isinstance(raised.value, dpconvert.DpconvertError) and "please report it" in str(raised.value)
    with pytest.raises(InternalError, match="the recorded events give"):
        check_spent(forgetful, delta=1e-5, target=None)
