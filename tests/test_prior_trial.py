"""The prior trial: an RGB teacher's data-free prior family chosen from a small first release, and what that costs on the
card (its event composes into the record-level bound; the query-level ε stays one release's; the audit checks it)."""

from __future__ import annotations

import json

import pytest
import torch

from dpconvert.io.spec import InputSpec
from dpconvert.methods.prior_trial import TRIAL_FAMILIES, TRIAL_IMAGES, TRIAL_VIEWS, effective_classes, trial_applies

RGB = InputSpec(3, 32, 32, 10, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 5, stride=4)
        self.fc = torch.nn.Linear(8 * 7 * 7, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def rgb_card(tmp_path_factory):
    """A data-free conversion of a small RGB 32×32 TorchScript teacher with the defaults that matter here."""
    import dpconvert

    d = tmp_path_factory.mktemp("trial")
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(_Tiny().eval()), str(d / "rgb.pt"))
    out = d / "s.onnx"
    loader = dpconvert.LoadOptions(input_size=(3, 32, 32), mean=RGB.mean, std=RGB.std)
    dpconvert.convert(str(d / "rgb.pt"), out=out, loader=loader, eps=1, delta=1e-5, batch_size=3000, epochs=1, seed=0)
    return out, json.loads((d / "s.onnx.card.json").read_text())


def test_the_trial_runs_only_where_the_input_shape_cannot_decide():
    from types import SimpleNamespace

    from dpconvert.methods.dpdfd_options import DpdfdOptions

    plain = SimpleNamespace(public_data=None)
    assert trial_applies(plain, DpdfdOptions(), RGB)
    assert not trial_applies(plain, DpdfdOptions(prior="natural_crops"), RGB)  # named by the user
    assert not trial_applies(plain, DpdfdOptions(accounting="composed"), RGB)  # it would be one more release to compose
    assert not trial_applies(plain, DpdfdOptions(), InputSpec(1, 28, 28, 10))  # grey: framed fields by the input rule
    assert not trial_applies(SimpleNamespace(public_data="p.npz"), DpdfdOptions(), RGB)
    assert not trial_applies(plain, DpdfdOptions(public_targets="rows"), RGB)
    assert not trial_applies(plain, DpdfdOptions(), InputSpec(3, 224, 224, 10))  # one target per row there


def test_effective_classes_counts_how_evenly_the_top_classes_spread():
    one = torch.zeros(50, 10)
    one[:, 3] = 1
    even = torch.eye(10).repeat(5, 1)
    assert effective_classes(one) == pytest.approx(1.0) and effective_classes(even) == pytest.approx(10.0)


def test_a_trial_release_chooses_the_prior_and_the_card_states_its_cost(rgb_card):
    from dpconvert.accounting import ACCOUNTANTS
    from dpconvert.accounting import dpdfd as acc
    from dpconvert.generators import PRIORS

    _, card = rgb_card
    m, g = card["mechanism"], card["guarantee"]
    trial = m["prior_trial"]
    rows = len(TRIAL_FAMILIES) * TRIAL_IMAGES * TRIAL_VIEWS
    assert trial["rows"] == rows and trial["families"] == list(TRIAL_FAMILIES)
    assert trial["chosen"] == TRIAL_FAMILIES[max(range(len(TRIAL_FAMILIES)), key=trial["effective_classes"].__getitem__)]
    assert PRIORS[trial["chosen"]] in m["query_source"]
    events = card["accounting"]["state"]["events"]
    assert [e["params"]["batch_size"] for e in events] == [rows, 3000] and m["releases"] == 1
    assert all(e["params"]["sigma"] == m["sigma"] for e in events)  # the run's own mechanism
    sigma, delta = m["sigma"], g["delta"]
    assert delta <= 1 / (rows + 3000)  # the trial's answers count among the run's
    # query-level: one release's ε (per answer); record-level: every row of both releases composes
    assert g["epsilon"] == pytest.approx(acc.epsilon(sigma=sigma, steps=1, delta=delta), rel=1e-9)
    assert g["record_level_epsilon"] == pytest.approx(acc.epsilon(sigma=sigma, steps=1, delta=delta, batch_size=rows + 3000, scope="record"), rel=1e-9)
    assert g["record_level_epsilon"] > acc.epsilon(sigma=sigma, steps=1, delta=delta, batch_size=3000, scope="record")
    assert ACCOUNTANTS.get(card["accounting"]["accountant"])().load_state_dict(card["accounting"]["state"]).count("normalised_gaussian_release") == 2


def test_the_audit_checks_the_trial(rgb_card, tmp_path, cli):
    out, card = rgb_card
    code, _, err = cli("audit", out)
    assert code == 0, err

    def audit(edit) -> tuple[int, str]:
        bad = json.loads(json.dumps(card))
        edit(bad)
        path = tmp_path / "edited.card.json"
        path.write_text(json.dumps(bad))
        code, stdout, stderr = cli("audit", path)
        return code, stdout + stderr

    other = next(f for f in TRIAL_FAMILIES if f != card["mechanism"]["prior_trial"]["chosen"])
    code, text = audit(lambda c: c["mechanism"]["prior_trial"].update(chosen=other))
    assert code != 0 and "prior_trial.chosen" in text
    code, text = audit(lambda c: c["mechanism"].pop("prior_trial"))  # the trial's event is then unexplained
    assert code != 0 and "batch_size" in text
    code, text = audit(lambda c: c["mechanism"]["prior_trial"].update(rows=1000))
    assert code != 0 and "prior_trial" in text
