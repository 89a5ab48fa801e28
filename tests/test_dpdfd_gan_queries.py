"""DPDFD on the samples of a GAN with a DP critic (`--generator dpgan`): two scopes on one card.

The teacher's answers keep DPDFD's per-answer (query-level) ε; the private records the GAN's critic read get the
critic's record-level ε (``guarantee.queries_record_level_epsilon``); the record-level worst case composes the critic
with every DPDFD row moving. Tested: the accountant against single-Gaussian numbers written here; the plan against the
card; the CLI end to end through the audit; forged cards failing on the field; one-line errors for options that do not
go together.
"""

from __future__ import annotations

import json
import math

import pytest

from dpconvert.accounting import DpdfdAccountant, DpganAccountant, DpganDpdfdAccountant, PerAnswerDpdfdAccountant

from tests.gaussian_reference import exact_gaussian_epsilon, pld_one_gaussian

DELTA = 1e-6


def _accountant(dpdfd_sigma=4.0, gan_sigma=2.5, batch=10_000, releases=3):
    a = DpganDpdfdAccountant()
    a.record("subsampled_gaussian", sigma=gan_sigma, clip=1.0, sampling_rate=1.0)  # the embedding critic's one release
    for _ in range(releases):
        a.record("normalised_gaussian_release", sigma=dpdfd_sigma, clip=1.0, batch_size=batch)
    return a


def test_each_scope_is_its_own_mechanism_and_the_worst_case_composes_both():
    a = _accountant()
    # query level: the GAN never sees the teacher, so neighbouring teachers give the same GAN: one answer, one Gaussian
    assert a.epsilon(delta=DELTA) == pytest.approx(pld_one_gaussian(4.0, DELTA), rel=2e-3)
    per_answer = PerAnswerDpdfdAccountant()
    for _ in range(3):
        per_answer.record("normalised_gaussian_release", sigma=4.0, clip=1.0, batch_size=10_000)
    assert a.epsilon(delta=DELTA) == per_answer.epsilon(delta=DELTA)
    # the records the critic read: one Gaussian release of sensitivity 1 (clip) at multiplier 2.5
    assert a.queries_record_level_epsilon(delta=DELTA) == pytest.approx(pld_one_gaussian(2.5, DELTA), rel=2e-3)
    # worst case: every DPDFD row moves by 2C (3 releases of 10 000 rows) besides the critic, each at δ/2; the tiny
    # multiplier's exact ε is the reference (dp-accounting's PLD of it takes minutes and is 1 % above it, as is the
    # accountant's: a valid bound, never below the exact one)
    rows = 3 * 10_000
    worst = exact_gaussian_epsilon(4.0 / (2 * math.sqrt(rows)), DELTA / 2) + exact_gaussian_epsilon(2.5, DELTA / 2)
    assert worst <= a.record_level_epsilon(delta=DELTA) <= worst * 1.02
    assert a.record_level_epsilon(delta=DELTA) > DpdfdAccountant(events=per_answer.events).record_level_epsilon(delta=DELTA)
    assert a.scope == "query" and "DP critic" in a.adjacency


def test_less_critic_noise_raises_only_the_records_scope():
    base, noisier = _accountant(gan_sigma=2.5), _accountant(gan_sigma=1.25)
    assert noisier.queries_record_level_epsilon(delta=DELTA) > base.queries_record_level_epsilon(delta=DELTA)
    assert noisier.epsilon(delta=DELTA) == base.epsilon(delta=DELTA)
    assert DpganAccountant(events=base.parts()[1].events).epsilon(delta=DELTA) == base.queries_record_level_epsilon(delta=DELTA)


# ------------------------------------------------------------------ the CLI end to end
SMALL = ["--method", "dpdfd", "--generator", "dpgan", "--private-data", "builtin:digits:train", "--gan-generator-steps", "30",
         "--prior-images", "200", "--batch-size", "20000", "--epochs", "1"]


@pytest.fixture(scope="module")
def gan_card(tmp_path_factory):
    from tests.conftest import main_exit_code

    d = tmp_path_factory.mktemp("ganq")
    out = d / "s.onnx"
    assert main_exit_code(["builtin:digits", *SMALL, "--eps", "1", "--generator-eps", "2", "--seed", "0", "--out", str(out)]) == 0
    return out, json.loads((d / "s.onnx.card.json").read_text())


@pytest.mark.slow
def test_a_gan_query_run_states_both_scopes_and_passes_the_audit(gan_card, cli):
    import dpconvert

    out, card = gan_card
    g, m = card["guarantee"], card["mechanism"]
    assert card["accounting"]["accountant"] == "dpdfd_per_answer+dpgan" and g["scope"] == "query"
    assert g["epsilon"] <= 1.0 * (1 + 1e-9) and g["queries_record_level_epsilon"] <= 2.0 * (1 + 1e-9)
    assert g["queries_record_level_epsilon"] == pytest.approx(pld_one_gaussian(m["query_generator"]["dpgan"]["sigma"], g["delta"]), rel=2e-3)
    assert m["query_generator"]["samples"] == 200 and "not data-free" in m["query_source"] and "not data-free" in m["method_choice"]
    assert m["query_generator"]["its_delta"] == g["delta"]
    plan = dpconvert.plan(method="dpdfd", eps=1.0, input_size=(1, 8, 8), generator="dpgan", generator_eps=2.0, prior_images=200,
                          batch_size=20000)
    for key in ("epsilon", "record_level_epsilon", "queries_record_level_epsilon", "delta"):
        assert getattr(plan, key) == pytest.approx(g[key], rel=1e-9), key  # what `dpconvert plan` prints is what ran
    assert cli("audit", out)[0] == 0
    md = out.with_name("s.onnx.card.md").read_text()
    assert "The queries' record level" in md


@pytest.mark.slow
@pytest.mark.parametrize("edit,field", [
    (lambda c: c["guarantee"].update(queries_record_level_epsilon=0.01), "guarantee.queries_record_level_epsilon"),
    (lambda c: c["guarantee"].pop("queries_record_level_epsilon"), "guarantee.queries_record_level_epsilon"),
    (lambda c: c["accounting"]["state"]["events"][0]["params"].update(sigma=50.0), "mechanism.query_generator.dpgan.sigma"),
    (lambda c: c["mechanism"].pop("query_generator"), "mechanism.query_generator"),
    (lambda c: c["guarantee"].update(not_covered=c["guarantee"]["not_covered"][:-1]), "guarantee.not_covered"),
    (lambda c: c["guarantee"].update(record_level_epsilon=5.0), "guarantee.record_level_epsilon"),
])
def test_a_forged_gan_query_card_fails_on_the_field(gan_card, edit, field):
    from dpconvert.auditing.card_checks import check_card

    forged = json.loads(json.dumps(gan_card[1]))
    edit(forged)
    assert field in {w for w, _ in check_card(forged)[1]}


@pytest.mark.slow
def test_dropping_the_critic_from_the_accountant_is_caught(gan_card):
    """A card rewritten as a plain per-answer DPDFD run (the critic's events and accountant gone, the GAN block kept)."""
    from dpconvert.auditing.card_checks import check_card

    forged = json.loads(json.dumps(gan_card[1]))
    acct = forged["accounting"]
    acct["accountant"] = acct["state"]["accountant"] = "dpdfd_per_answer"
    acct["state"]["events"] = [e for e in acct["state"]["events"] if e["mechanism"] == "normalised_gaussian_release"]
    fields = {w for w, _ in check_card(forged)[1]}
    assert {"mechanism.query_generator", "guarantee.queries_record_level_epsilon"} <= fields


@pytest.mark.parametrize("args,needle", [
    (["--method", "dpdfd", "--private-data", "builtin:digits:train"], "DPDFD reads no private data"),
    (["--generator", "dpgan"], "--generator dpgan trains a GAN with a DP critic on --private-data"),
    (["--generator-eps", "2"], "--generator-eps is the DP-critic GAN's ε"),
    (["--method", "dpdfd", "--generator", "dpgan", "--private-data", "builtin:digits:train", "--public-data", "builtin:digits"],
     "drop --public-data"),
    (["--method", "dpdfd", "--generator", "dpgan", "--private-data", "builtin:digits:train", "--accounting", "composed"],
     "drop --accounting composed"),
])
def test_options_that_do_not_go_together_are_one_line_errors(args, needle, tmp_path, cli):
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", *args, "--eps", "1", "--out", out)
    assert code != 0 and needle in err and not out.exists()
