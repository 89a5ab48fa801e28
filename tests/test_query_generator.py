"""Private-kNN on generator queries: a saved DPDFD generator's cost is composed into the card; the prior costs nothing."""

from __future__ import annotations

import json

import pytest
import torch

from dpconvert.accounting import DpdfdAccountant, PknnAccountant
from dpconvert.auditing.card_checks import check_card

DPDFD_FAST = ["--steps", "2", "--batch-size", "1500", "--epochs", "1", "--generator", "dafl_small"]
PKNN_FAST = ["--method", "pknn", "--private-data", "builtin:digits:train", "--k", "40", "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "2",
             "--queries", "300", "--delta", "1e-4"]


@pytest.fixture(scope="module")
def saved_generator(tmp_path_factory):
    from conftest import main_exit_code

    d = tmp_path_factory.mktemp("gen")
    gen = d / "gen.safetensors"
    assert main_exit_code(["builtin:digits", "--eps", "2", "--delta", "1e-4", *DPDFD_FAST, "--save-generator", gen, "--out", d / "dpdfd.onnx"]) == 0
    return gen, json.loads((d / "dpdfd.onnx.card.json").read_text())


@pytest.mark.slow
def test_saved_generator_carries_its_dpdfd_events(saved_generator):
    from dpconvert.generators.saved import load_saved_generator

    gen, card = saved_generator
    saved = load_saved_generator(gen)
    assert saved.name == "dafl_small" and saved.spec.shape == (1, 8, 8) and saved.spec.num_classes == 10
    # the run's events, recorded for the composed accountant (valid for any run; the card itself is per answer)
    assert saved.cost.accountant_state == {"accountant": "dpdfd", "events": card["accounting"]["state"]["events"]}
    assert saved.cost.teacher_sha256 == card["teacher"]["sha256"]
    composed = DpdfdAccountant().load_state_dict(saved.cost.accountant_state).epsilon(delta=card["guarantee"]["delta"])
    assert saved.cost.card_epsilon == pytest.approx(composed) and composed >= card["guarantee"]["epsilon"]
    x = saved.generator(torch.randn(4, saved.generator.nz), torch.arange(4))
    assert x.shape == (4, 1, 8, 8) and torch.isfinite(x).all()


@pytest.mark.slow
def test_pknn_on_generator_queries_composes_the_generator_cost(saved_generator, tmp_path, cli):
    gen, gen_card = saved_generator
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", gen, "--eps", "8", *PKNN_FAST, "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    g = card["guarantee"]
    assert g["scope"] == "query" and "teacher answer" in g["adjacency"] and g["epsilon"] <= 8
    # ε = ε_DPDFD(δ/2) + ε_PkNN(δ/2), each recomputed independently from its own events
    gen_part = DpdfdAccountant().load_state_dict({"accountant": "dpdfd", "events": gen_card["accounting"]["state"]["events"]})
    events = card["accounting"]["state"]["events"]
    labels = PknnAccountant().load_state_dict({"accountant": "pknn", "events": [e for e in events if e["mechanism"].startswith("pknn")]})
    expected = gen_part.epsilon(delta=5e-5) + labels.epsilon(delta=5e-5)
    assert g["epsilon"] == pytest.approx(expected, rel=1e-9)
    assert gen_part.epsilon(delta=5e-5) > gen_card["guarantee"]["epsilon"]  # half the δ costs more ε: not a copy of the old card
    assert g["record_level_epsilon"] == pytest.approx(gen_part.record_level_epsilon(delta=5e-5) + labels.epsilon(delta=5e-5), rel=1e-9)
    true, problems = check_card(card)
    assert problems == [] and true["epsilon"] == pytest.approx(g["epsilon"], rel=1e-9)
    assert card["mechanism"]["query_generator"]["file"] == "gen.safetensors"
    code, outp, _ = cli("audit", out, "--max-eps", "8")
    assert code == 0, outp
    code, outp, _ = cli("audit", out, "--require-scope", "record")
    assert code == 1 and "policy scope" in outp


def test_pknn_prior_queries_follow_the_prior_flag(tmp_path, cli):
    out = tmp_path / "p.onnx"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", "prior", "--prior", "centred_fields", "--eps", "4",
                       *PKNN_FAST, "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "p.onnx.card.json").read_text())
    assert card["mechanism"]["query_source"].startswith("centred random-field prior")


def test_pknn_on_prior_queries_is_record_level(tmp_path, cli):
    out = tmp_path / "p.onnx"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", "prior", "--eps", "4", *PKNN_FAST, "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "p.onnx.card.json").read_text())
    assert card["guarantee"]["scope"] == "record" and card["accounting"]["accountant"] == "pknn"
    assert card["mechanism"]["queries_asked"] == 300 and "data-independent" in card["mechanism"]["query_source"]
    code, outp, _ = cli("audit", out, "--require-scope", "record", "--max-eps", "4")
    assert code == 0, outp


@pytest.mark.parametrize("args,needle", [
    (["--eps", "1", "--save-generator", "{d}/g.safetensors", "--steps", "1", "--batch-size", "500"], "needs a learned generator"),
    (["--eps", "1", "--generator", "dafl_small", "--save-generator", "{d}/g.pt"], "must end in .safetensors"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--public-data", "builtin:digits", "--query-generator", "prior"], "give one query source"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "{d}/missing.safetensors"], "no such generator file"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "prior", "--generator-eps", "0.5"], "use it with --query-generator train"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "train", "--generator-eps", "1"], "--generator-eps must be between 0"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "prior", "--save-generator", "{d}/g.safetensors"], "add --query-generator train"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "train", "--save-generator", "{d}/g.pt"], "must end in .safetensors"),
    # checked before the generator is trained: what it leaves (0.05 at δ/2) cannot pay for screening 300 queries
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "train", "--generator-eps", "0.95"], "screening alone already costs"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "{d}/junk.safetensors"], "not a safetensors generator"),
    # DPDFD-only flags are refused where they would be ignored
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--public-data", "builtin:digits", "--prior", "centred_fields"], "use it with --query-generator prior or train"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "prior", "--prior", "dafl"], "unknown --prior 'dafl'"),
    (["--method", "pknn", "--eps", "1", *PKNN_FAST, "--query-generator", "prior", "--distill-loss", "ce"], "configures the generator trained in the run); add --query-generator train"),
    (["--method", "dpdfd", "--eps", "1", "--public-data", "builtin:digits", "--prior", "centred_fields"], "drop one of them"),
])
def test_bad_generator_inputs(tmp_path, cli, args, needle):
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    out = tmp_path / "s.onnx"
    code, _, err = cli("builtin:digits", *[a.format(d=tmp_path) for a in args], "--out", out)
    assert code == (2 if needle.startswith("unknown") else 1) and needle in err, err  # an unknown choice is a usage error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.safetensors"]  # nothing written


def test_generator_costing_more_than_eps_is_refused(saved_generator, tmp_path, cli):
    gen, _ = saved_generator
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", gen, "--eps", "1", *PKNN_FAST, "--out", tmp_path / "s.onnx")
    assert code == 1 and "the query generator alone costs" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_pknn_with_a_generator_trained_in_the_same_run(tmp_path, cli):
    """--query-generator train: DPDFD at the generator's share of ε (δ/2), then Private-kNN on its samples, composed."""
    from dpconvert.generators.saved import load_saved_generator

    out, gen = tmp_path / "s.onnx", tmp_path / "g.safetensors"
    code, _, err = cli("builtin:digits", "--method", "pknn", "--query-generator", "train", "--generator", "dafl_small", "--generator-eps", "3",
                       "--save-generator", gen, "--batch-size", "1500", "--eps", "8", *PKNN_FAST, "--out", out, "--seeded-noise")
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    g, m = card["guarantee"], card["mechanism"]
    assert g["scope"] == "query" and card["accounting"]["accountant"] == "pknn+dpdfd_generator" and g["epsilon"] <= 8
    info = m["query_generator"]
    # with seeded noise the generator's DPDFD stream and Private-kNN's stream come from different seeds
    from dpconvert.seeds import SUB_RUN_SHIFT, seed_of

    assert f"seeded with {seed_of('noise', SUB_RUN_SHIFT)} " in info["dpdfd"]["noise_rng"] and f"seeded with {seed_of('noise', 0)} " in m["noise_rng"]
    assert info["trained_in_this_run"] and info["architecture"] == "dafl_small" and info["dpdfd"]["releases"] == 2  # ≥ 2: it learns between releases
    events = card["accounting"]["state"]["events"]
    gen_part = DpdfdAccountant().load_state_dict({"accountant": "dpdfd", "events": [e for e in events if not e["mechanism"].startswith("pknn")]})
    labels = PknnAccountant().load_state_dict({"accountant": "pknn", "events": [e for e in events if e["mechanism"].startswith("pknn")]})
    assert gen_part.epsilon(delta=5e-5) == pytest.approx(3.0, rel=1e-6)  # calibrated to its share at δ/2
    assert g["epsilon"] == pytest.approx(gen_part.epsilon(delta=5e-5) + labels.epsilon(delta=5e-5), rel=1e-9)
    true, problems = check_card(card)
    assert problems == [] and true["epsilon"] == pytest.approx(g["epsilon"], rel=1e-9)
    saved = load_saved_generator(gen)  # written with the model and card; its events are the ones composed here
    assert saved.cost.accountant_state["events"] == [e for e in events if not e["mechanism"].startswith("pknn")]
    code, outp, _ = cli("audit", out, "--max-eps", "8", "--allow-seeded-noise")
    assert code == 0, outp
