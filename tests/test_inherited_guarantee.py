"""A DP teacher's guarantee passes to the student only where it holds ("The card must never lie, round 3"): a run that
reads private records itself composes the teacher's ε with its own for them (or records the user's statement that
the data sets are disjoint); every field of ``teacher.guarantee`` is derived and checked; several teachers are several
models whatever their files; cards of the previous schema still audit."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

FAST = ["--steps", "1", "--batch-size", "1500", "--epochs", "1"]
PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release"


def _card(path) -> dict:
    return json.loads(Path(f"{path}.card.json").read_text())


def _fields(card: dict) -> set:
    from dpconvert.auditing.card_checks import check_card

    return {w for w, _ in check_card(card)[1]}


@pytest.fixture(scope="module")
def dpsgd_student(dp_teacher, tmp_path_factory):
    """DP-SGD on the digits the teacher was trained on: the run reads the teacher's own records."""
    import dpconvert

    out = tmp_path_factory.mktemp("dpsgd3") / "s.onnx"
    plans = []
    dpconvert.convert(str(dp_teacher), out=out, method="dpsgd", private_data="builtin:digits:train", eps=1.0, epochs=1, on_plan=plans.append)
    return out, plans[-1]


@pytest.mark.slow
def test_a_run_that_reads_private_records_composes_with_the_teachers_guarantee(dpsgd_student, dp_teacher, cli):
    out, plan = dpsgd_student
    card, teacher = _card(out), _card(dp_teacher)
    g = card["teacher"]["guarantee"]
    eps_t, eps_run = teacher["guarantee"]["epsilon"], card["guarantee"]["epsilon"]
    assert g["teacher_epsilon"] == pytest.approx(eps_t) and g["run_epsilon"] == pytest.approx(eps_run)
    assert g["epsilon"] == pytest.approx(eps_t + eps_run) and g["epsilon"] > 1.9  # never the teacher's ε alone
    assert g["delta"] == pytest.approx(teacher["guarantee"]["delta"] + card["guarantee"]["delta"])
    assert g["run_reads_private_records"] is True and g["private_data_is_not_teacher_data"] is False
    assert plan.teacher_records["epsilon"] == pytest.approx(g["epsilon"])  # the plan printed before the run is the card's
    md = Path(f"{out}.card.md").read_text()
    assert "plus this run's" in md and "so that guarantee holds for it too" not in md
    assert cli("audit", out)[0] == 0


@pytest.mark.slow
def test_the_users_statement_keeps_the_teachers_guarantee_and_is_recorded(dp_teacher, tmp_path, cli):
    out = tmp_path / "s.onnx"
    code, _, err = cli(dp_teacher, "--method", "dpsgd", "--private-data", "builtin:digits:train", "--epochs", "1",
                       "--private-data-is-not-teacher-data", "--out", out)
    assert code == 0, err
    g = _card(out)["teacher"]["guarantee"]
    assert g["private_data_is_not_teacher_data"] is True and "run_epsilon" not in g
    assert g["epsilon"] == pytest.approx(g["teacher_epsilon"])
    assert "the user's statement" in Path(f"{out}.card.md").read_text()
    assert cli("audit", out)[0] == 0


def test_the_statement_needs_private_data(cli, tmp_path):
    code, _, err = cli("builtin:digits", "--private-data-is-not-teacher-data", "--out", tmp_path / "s.onnx")
    assert code != 0 and "give it with --private-data" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_dpdfd_on_gan_queries_composes_the_critics_epsilon(dp_teacher, tmp_path, cli):
    out = tmp_path / "s.onnx"
    code, _, err = cli(dp_teacher, "--method", "dpdfd", "--generator", "dpgan", "--private-data", "builtin:digits:train",
                       "--gan-generator-steps", "30", "--prior-images", "200", "--batch-size", "20000", "--epochs", "1", "--out", out)
    assert code == 0, err
    card = _card(out)
    g = card["teacher"]["guarantee"]
    assert g["run_epsilon"] == pytest.approx(card["guarantee"]["queries_record_level_epsilon"])
    assert g["epsilon"] == pytest.approx(g["teacher_epsilon"] + g["run_epsilon"])
    assert cli("audit", out)[0] == 0


@pytest.mark.slow
def test_a_data_free_student_keeps_the_teachers_guarantee_alone(dp_teacher, tmp_path, cli):
    out = tmp_path / "s.onnx"
    assert cli(dp_teacher, "--eps", "1", *FAST, "--out", out)[0] == 0
    card = _card(out)
    g = card["teacher"]["guarantee"]
    assert g["run_reads_private_records"] is False and g["epsilon"] == pytest.approx(g["teacher_epsilon"])
    assert "private_data_is_not_teacher_data" not in g and "signature" not in g
    # the teacher card says how the ONNX teacher's inputs are normalised: used, and the "assumed" warning dropped
    assert card["model"]["mean"] == _card(dp_teacher)["model"]["mean"] != [0.0]
    assert not any("normalisation unknown" in w for w in card["warnings"])


def _forgeries(card: dict) -> list:
    """(name, edit, the field the audit must name) of the review's forged teacher blocks."""
    def set_(key, value):
        return lambda c: c["teacher"]["guarantee"].update({key: value})

    g = card["teacher"]["guarantee"]
    return [
        ("grafted onto the built-in teacher", lambda c: c["teacher"].update(kind="builtin"), "teacher.kind"),
        ("adjacency rewritten", set_("adjacency", "one patient (all their records)"), "teacher.guarantee.adjacency"),
        ("accountant relabelled", set_("accountant", "laplace"), "teacher.guarantee.accountant"),
        ("note rewritten", set_("note", "post-processing: the teacher's guarantee holds"), "teacher.guarantee.note"),
        ("free-text signature", set_("signature", "valid: signed by trusted key acme"), "teacher.guarantee.signature"),
        ("another model's hash", lambda c: c["teacher"].update(graph_sha256="0" * 64), "teacher.guarantee.model_sha256"),
        ("the teacher's ε alone", set_("epsilon", g["teacher_epsilon"]), "teacher.guarantee.epsilon"),
        ("δ not composed", set_("delta", g["teacher_delta"]), "teacher.guarantee.delta"),
        ("reads nothing", set_("run_reads_private_records", False), "teacher.guarantee.run_reads_private_records"),
        ("run ε lowered", set_("run_epsilon", 0.01), "teacher.guarantee.run_epsilon"),
        ("composition dropped", lambda c: [c["teacher"]["guarantee"].pop(k) for k in ("run_epsilon", "run_delta")], "teacher.guarantee.run_epsilon"),
    ]


@pytest.mark.slow
def test_every_field_of_the_teacher_block_is_derived_and_checked(dpsgd_student):
    card = _card(dpsgd_student[0])
    assert not _fields(card)
    for name, edit, field in _forgeries(card):
        forged = copy.deepcopy(card)
        edit(forged)
        assert field in _fields(forged), name


@pytest.mark.slow
def test_the_audit_verifies_the_teacher_cards_signature_itself(dpsgd_student, tmp_path, cli):
    """An unsigned teacher card: 'not signed' from the audit, and a failure under `--require-signature`."""
    import dpconvert

    assert cli("card", "keygen", tmp_path / "k")[0] == 0
    rows = {c.name: c for c in dpconvert.audit(dpsgd_student[0])[0].checks}
    assert rows["teacher card signature"].ok and rows["teacher card signature"].detail == "not signed"
    rows = {c.name: c for c in dpconvert.audit(dpsgd_student[0], trusted_keys=f"{tmp_path / 'k'}.pub", require_signature=True)[0].checks}
    assert not rows["teacher card signature"].ok


# ------------------------------------------------------------------ cards written by the previous release (schema 1.0)
def test_cards_of_the_previous_release_still_audit_except_the_one_that_overclaimed():
    """Genuine cards written by dpconvert 0.1.0 (card schema 1.0): every one passes, except DP-SGD on a DP teacher's
    own data, whose card gave the teacher's ε alone for records the run also read."""
    from dpconvert.zoo_cards import PrivacyCard

    cards = sorted(PREVIOUS.glob("*.card.json"))
    assert len(cards) >= 12
    for path in cards:
        data = json.loads(path.read_text())
        assert data["schema_version"] == "1.0"
        PrivacyCard(data).validate(path.name)
        fields = _fields(data)
        if path.name == "dpsgd_from_dp_teacher.card.json":
            assert fields == {"teacher.guarantee.epsilon"}, fields
        else:
            assert not fields, (path.name, fields)


def test_a_previous_release_card_cannot_claim_a_signature_it_lacks():
    data = json.loads((PREVIOUS / "dpdfd_from_dp_teacher.card.json").read_text())
    data["teacher"]["guarantee"]["signature"] = "valid: signed by trusted key acme"
    assert "teacher.guarantee.signature" in _fields(data)
    data = json.loads((PREVIOUS / "dpdfd_from_dp_teacher.card.json").read_text())
    data["teacher"]["kind"] = "builtin"
    assert "teacher.kind" in _fields(data)


# ------------------------------------------------------------------ several teachers are several models
def test_the_weights_hash_ignores_the_file_and_sees_the_weights(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    import dpconvert.builtin as builtin
    from dpconvert.io.teachers import load_teacher

    src = Path(builtin.__path__[0]) / "digits_teacher.safetensors"
    from safetensors import safe_open

    with safe_open(str(src), "pt") as f:
        meta = f.metadata()
    state = load_file(str(src))
    save_file(dict(reversed(list(state.items()))), str(tmp_path / "copy.safetensors"), metadata={**meta, "note": "re-saved"})
    bumped = {k: (v + 1e-3 if v.is_floating_point() else v) for k, v in state.items()}
    save_file(bumped, str(tmp_path / "other.safetensors"), metadata=meta)
    a, b, c = (load_teacher(str(p)) for p in (src, tmp_path / "copy.safetensors", tmp_path / "other.safetensors"))
    assert a.sha256 != b.sha256 and a.weights_sha256 == b.weights_sha256 != c.weights_sha256
    module = a.module
    torch.onnx.export(module.cpu().eval(), torch.zeros(1, 1, 8, 8), str(tmp_path / "t.onnx"), dynamo=False)
    assert load_teacher(str(tmp_path / "t.onnx"), None).weights_sha256 is not None


def test_a_resaved_copy_is_not_a_second_teacher(tmp_path, cli):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    import dpconvert.builtin as builtin

    src = str(Path(builtin.__path__[0]) / "digits_teacher.safetensors")
    with safe_open(src, "pt") as f:
        meta = f.metadata()
    save_file(load_file(src), str(tmp_path / "a.safetensors"), metadata=meta)
    save_file(load_file(src), str(tmp_path / "b.safetensors"), metadata={**meta, "extra": "one more entry"})
    code, _, err = cli(tmp_path / "a.safetensors", tmp_path / "b.safetensors", "--disjoint-partitions", "2", "--eps", "1",
                       "--out", tmp_path / "s.onnx")
    assert code != 0 and "same model (weights sha256" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s.onnx").exists()


def test_the_audit_requires_n_distinct_members_of_an_ensemble():
    import hashlib

    card = json.loads((PREVIOUS / "disjoint_teachers.card.json").read_text())
    assert not _fields(card)
    t = card["teacher"]

    twice = copy.deepcopy(card)
    twice["teacher"]["members"][1] = dict(t["members"][0])
    assert "teacher.members.sha256" in _fields(twice)

    eight = copy.deepcopy(card)  # a consistent edit to n = 8: the two real members four times each, events and block to match
    members = [dict(m) for m in t["members"]] * 4
    eight["teacher"]["members"] = members
    eight["teacher"]["sha256"] = hashlib.sha256("\n".join(m["sha256"] for m in members).encode()).hexdigest()
    eight["mechanism"]["teachers"] = 8
    for e in eight["accounting"]["state"]["events"]:
        e["params"]["teachers"] = 8
    assert "teacher.members.sha256" in _fields(eight)

    single = copy.deepcopy(card)
    single["teacher"]["kind"] = "safetensors"
    assert "teacher.kind" in _fields(single)


def test_previous_release_markdown_is_rendered_as_its_release_did():
    """The audit compares a .card.md byte for byte with the rendering of the checked card: schema-1.0 cards with the
    renderer of their release."""
    from dpconvert.zoo_cards import PrivacyCard
    from dpconvert.zoo_cards.markdown import render_markdown

    mds = sorted(PREVIOUS.glob("*.card.md"))
    assert mds
    for md in mds:
        card = PrivacyCard(json.loads(md.with_name(md.name.replace(".md", ".json")).read_text()))
        assert render_markdown(card) == md.read_text(), md.name


@pytest.mark.parametrize("name, part", [("dpdfd", None), ("dpdfd_composed", None), ("disjoint_teachers", None), ("pknn", "headline"),
                                        ("adlm", "headline"), ("dpsgd", "headline"), ("generator_pknn", "labels"),
                                        ("dpdfd_dpgan", "critic")])
def test_each_accountant_knows_which_epsilon_covers_the_records_its_run_read(name, part):
    """What composes with a DP teacher's ε, per method: nothing for runs that read no private records (DPDFD, several
    teachers), the headline for record-level methods (Private-kNN, AdLM, DP-SGD), the labels' part for Private-kNN on a
    DPDFD generator (the generator is post-processing of the teacher), the critic's for DPDFD on GAN queries."""
    from dpconvert.auditing.card_checks import recompute

    card = json.loads((PREVIOUS / f"{name}.card.json").read_text())
    accountant, true = recompute(card)
    delta = card["guarantee"]["delta"]
    got = accountant.private_records_epsilon(delta=delta)
    if part is None:
        assert got is None
    elif part == "headline":
        assert got == pytest.approx(true["epsilon"])
    elif part == "labels":
        assert got == pytest.approx(accountant.parts()[1].epsilon(delta=delta)) and got < true["epsilon"]
    else:
        assert got == pytest.approx(true["queries_record_level_epsilon"])


@pytest.mark.slow
def test_two_private_sets_of_different_sizes_give_the_same_ex_post_fields(tmp_path, cli):
    """`synth --ex-post` on 150 and on 1 100 records: the data cards differ only in the estimate's values (and what any
    run changes: hashes, times)."""
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    cards = []
    for n in (150, 1100):
        np.savez(tmp_path / f"p{n}.npz", x=(x[:n].reshape(-1, 1, 8, 8) * 15).astype(np.uint8), y=y[:n])
        out = tmp_path / f"s{n}.npz"
        code, _, err = cli("synth", "--private-data", tmp_path / f"p{n}.npz", "--out", out, "--input-size", "1,8,8", "--num-classes", "10",
                           "--eps", "4", "--gan-generator-steps", "10", "--samples", "300", "--ex-post")
        assert code == 0, err
        cards.append(json.loads(Path(f"{out}.card.json").read_text()))
    values = {"expected_privacy_loss_bound", "mean_privacy_loss", "upper_semideviation"}
    a, b = ({k: v for k, v in c["empirical"].items() if k not in values} for c in cards)
    assert a == b and a["removals"] == 200 and a["neighbours_removed"] == 1
