"""Membership inference: a deliberately overfit model is clearly attackable (so the attack can fail a model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpconvert.auditing.membership import roc_metrics, run_attacks


def test_metrics_on_known_scores():
    rng = np.random.default_rng(0)
    same = roc_metrics(rng.normal(size=4000), rng.normal(size=4000))
    assert abs(same["auc"] - 0.5) < 0.03 and same["tpr_at_1%_fpr"] < 0.03
    apart = roc_metrics(rng.normal(3, 1, 2000), rng.normal(0, 1, 2000))
    assert apart["auc"] > 0.97 and apart["advantage"] > 0.8


@pytest.fixture(scope="module")
def overfit(tmp_path_factory):
    from dpconvert.io.data import digits_split
    from dpconvert.io.spec import InputSpec
    from dpconvert.students import create_student

    d = tmp_path_factory.mktemp("mia")
    torch.manual_seed(0)
    train, test = digits_split("train"), digits_split("test")
    rng = np.random.default_rng(0)
    mem_x, non_x = train.pixels[:150], test.pixels[:150]
    mem_y = rng.integers(0, 10, 150)  # random labels: only memorisation can fit them
    non_y = rng.integers(0, 10, 150)
    spec = InputSpec(1, 8, 8, 10)
    model = create_student("datalens_cnn", spec)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = torch.from_numpy(mem_x), torch.from_numpy(mem_y)
    model.train()
    for _ in range(300):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    torch.onnx.export(model, (x[:2],), str(d / "overfit.onnx"), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, dynamo=False)
    np.savez(d / "members.npz", x=mem_x[:, 0], y=mem_y)
    np.savez(d / "non_members.npz", x=non_x[:, 0], y=non_y)
    return d, model, (x, y, torch.from_numpy(non_x), torch.from_numpy(non_y))


@pytest.mark.slow
def test_overfit_model_is_clearly_attacked(overfit):
    _, model, (xi, yi, xo, yo) = overfit
    with torch.no_grad():
        results = run_attacks(model(xi).numpy(), yi.numpy(), model(xo).numpy(), yo.numpy(), bootstrap=50)
    by = {r.attack: r for r in results}
    assert by["loss"].metrics["auc"] >= 0.7
    assert by["lira_offline"].metrics["auc"] >= 0.7
    lo, hi = by["loss"].ci95["auc"]
    assert lo <= by["loss"].metrics["auc"] <= hi


def test_audit_cli_membership(overfit, cli, tmp_path):
    d, _, _ = overfit
    rep = tmp_path / "r.json"
    code, out, err = cli("audit", d / "overfit.onnx", "--allow-missing", "--members", d / "members.npz",
                         "--non-members", d / "non_members.npz", "--mean", "0", "--std", "1", "--json", rep, "--plot", tmp_path / "roc.png")
    assert code == 0, err
    mia = json.loads(rep.read_text())["membership_inference"]
    (model_report,) = mia.values()
    assert model_report["model"]["loss"]["auc"] >= 0.7
    assert (tmp_path / "roc.png").stat().st_size > 1000
    assert "membership inference" in out


def test_members_without_non_members_is_usage_error(overfit, cli):
    d, _, _ = overfit
    assert cli("audit", d / "overfit.onnx", "--allow-missing", "--members", d / "members.npz")[0] == 2


def test_write_card_records_empirical_audit(cli, tmp_path):
    import numpy as np

    from dpconvert.io.data import digits_split
    from dpconvert import convert
    from dpconvert.zoo_cards import PrivacyCard, extract_card

    out = tmp_path / "s.onnx"
    convert("builtin:digits", out=out, releases=1, batch_size=500, epochs=1)
    tr, te = digits_split("train"), digits_split("test")
    np.savez(tmp_path / "m.npz", x=tr.pixels[:100, 0], y=tr.labels[:100])
    np.savez(tmp_path / "n.npz", x=te.pixels[:100, 0], y=te.labels[:100])
    code, _, err = cli("audit", out, "--members", tmp_path / "m.npz", "--non-members", tmp_path / "n.npz", "--write-card")
    assert code == 0, err
    card = PrivacyCard.read(f"{out}.card.json")
    assert "not a DP guarantee" in card.data["audit"]["kind"]
    assert card.data["audit"]["results"]["model"]["loss"]["auc"] > 0
    import onnx

    assert extract_card(onnx.load(str(out))).data == card.data
    assert cli("audit", out)[0] == 0  # hash and copies still agree

    # a signed card is not rewritten: the added block would void the signature without a word
    assert cli("card", "keygen", tmp_path / "k")[0] == 0 and cli("card", "sign", out, "--key", tmp_path / "k")[0] == 0
    before = (tmp_path / "s.onnx.card.json").read_bytes()
    code, _, err = cli("audit", out, "--members", tmp_path / "m.npz", "--non-members", tmp_path / "n.npz", "--write-card")
    assert code == 1 and "signed" in err and err.strip().count("\n") == 0
    assert (tmp_path / "s.onnx.card.json").read_bytes() == before


@pytest.mark.slow
def test_reference_model_lira_attacks_overfit_model(overfit, cli, tmp_path):
    d, _, _ = overfit
    rep = tmp_path / "r.json"
    code, out, err = cli("audit", d / "overfit.onnx", "--allow-missing", "--members", d / "members.npz",
                         "--non-members", d / "non_members.npz", "--mean", "0", "--std", "1", "--json", rep,
                         "--reference-models", "4", "--reference-epochs", "40")
    assert code == 0, err
    (model_report,) = json.loads(rep.read_text())["membership_inference"].values()
    assert model_report["model"]["lira_ref_offline"]["auc"] >= 0.7
    assert model_report["model"]["lira_ref_online"]["auc"] >= 0.7
    assert "reference model 4/4" in out


def test_reference_stats_fall_back_when_an_example_is_never_out():
    from dpconvert.auditing.membership import ReferenceStats

    phis = np.array([[1.0, 2.0, 3.0], [1.2, 2.2, 3.2]])
    masks = np.array([[True, False, True], [True, True, False]])
    st = ReferenceStats.from_phis(phis, masks)
    assert st.mu_in[0] == pytest.approx(1.1) and st.mu_out[0] == pytest.approx(np.mean([2.0, 3.2]))  # no OUT model: global mean
    assert st.mu_out[1] == pytest.approx(2.0) and st.mu_out[2] == pytest.approx(3.2)


def test_one_reference_model_is_a_usage_error(overfit, cli):
    d, _, _ = overfit
    code, _, err = cli("audit", d / "overfit.onnx", "--allow-missing", "--members", d / "members.npz",
                       "--non-members", d / "non_members.npz", "--mean", "0", "--std", "1", "--reference-models", "1")
    assert code == 2 and "at least 2" in err
