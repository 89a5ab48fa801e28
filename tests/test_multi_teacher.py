"""Several teachers (DPDFD's multi-teacher extension) and the record-level bound of teachers on disjoint partitions.

Each released row is the mean of the n teachers' normalised rows, so one teacher — the one whose partition holds a
given record — moves every row by at most 2C/n, and the whole run by 2C·√(B·T)/n. Tested: the accountant against
independent single-Gaussian computations; the sensitivity of the rows the engine releases, by replacing one teacher;
the CLI end to end (files, a folder, a list file), its card through the audit, and forged cards failing on the field.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from dpconvert.accounting import DisjointTeachersDpdfdAccountant, DpdfdAccountant, PerAnswerDpdfdAccountant

from tests.gaussian_reference import gaussian_delta as _gaussian_delta
from tests.gaussian_reference import pld_one_gaussian as _pld_one_gaussian

DELTA = 1e-5


def _record(a, sigma: float, batch: int, releases: int, teachers: int):
    for _ in range(releases):
        a.record("normalised_gaussian_release", sigma=sigma, clip=1.0, batch_size=batch, teachers=teachers)
    return a




@pytest.mark.parametrize("n,batch,releases,sigma", [(10, 1000, 1, 30.0), (250, 10_000, 1, 3.0), (50, 2000, 4, 12.0)])
def test_disjoint_teachers_epsilon_is_one_gaussian_of_sensitivity_2_sqrt_BT_over_n(n, batch, releases, sigma):
    a = _record(DisjointTeachersDpdfdAccountant(), sigma, batch, releases, n)
    eps = a.epsilon(delta=DELTA)
    mu = 2 * math.sqrt(batch * releases) / (n * sigma)  # written out here, not taken from dpconvert
    assert eps == pytest.approx(_pld_one_gaussian(1 / mu, DELTA), rel=2e-3)
    assert _gaussian_delta(eps, mu) <= DELTA * (1 + 1e-6) and _gaussian_delta(eps * 0.999, mu) > DELTA  # true and tight
    assert a.scope == "record" and a.record_level_epsilon(delta=DELTA) == eps
    # the per-answer bound beside it is one teacher's; the worst case without disjointness is n = 1's
    one = _record(PerAnswerDpdfdAccountant(), sigma, batch, releases, n)
    assert a.query_level_epsilon(delta=DELTA) == one.epsilon(delta=DELTA)
    assert one.record_level_epsilon(delta=DELTA) == _record(DpdfdAccountant(), sigma, batch, releases, 1).record_level_epsilon(delta=DELTA)
    assert one.record_level_epsilon(delta=DELTA) > eps
    replayed = DisjointTeachersDpdfdAccountant().load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert replayed.epsilon(delta=DELTA) == eps


def test_plan_calibrates_sigma_to_the_record_level_target():
    from dpconvert.accounting.planning import plan_dpdfd

    for n, batch, eps in ((250, 10_000, 1.0), (50, 2000, 8.0)):
        plan = plan_dpdfd(eps=eps, delta=DELTA, steps=1, batch_size=batch, disjoint_teachers=n)
        assert plan.epsilon == pytest.approx(eps, rel=1e-5) and plan.epsilon <= eps and plan.scope == "record"
        a = _record(DisjointTeachersDpdfdAccountant(), plan.sigma, batch, 1, n)
        assert a.epsilon(delta=DELTA) == pytest.approx(plan.epsilon, rel=1e-12)
        assert plan.query_level_epsilon == pytest.approx(_record(PerAnswerDpdfdAccountant(), plan.sigma, batch, 1, n).epsilon(delta=DELTA))


def test_one_teacher_replaced_moves_every_row_by_at_most_2C_over_n():
    """The release's rows for n teachers, and for the same n with one teacher replaced by an adversarial one: each row
    moves by at most 2C/n, and a clipped mean of normalised rows is never longer than C."""
    from dpconvert.mechanisms.gaussian_release import NormalisedGaussianRelease

    g = torch.Generator().manual_seed(0)
    mech = NormalisedGaussianRelease(sigma=1.0, clip=2.5, accountant=DisjointTeachersDpdfdAccountant(), generator=g)
    for n in (2, 7, 50):
        grads = [torch.randn(300, 10, generator=g) * 10 ** torch.randn(300, 1, generator=g) for _ in range(n)]
        rows = mech.clip_rows(mech.mean_of_normalised(grads))
        assert (rows.norm(dim=1) <= 2.5 * (1 + 1e-6)).all()
        for j in (0, n - 1):
            other = list(grads)
            other[j] = -grads[j] * 1e6 + torch.randn(300, 10, generator=g)  # the worst neighbour: the opposite direction
            moved = (mech.clip_rows(mech.mean_of_normalised(other)) - rows).norm(dim=1)
            assert (moved <= 2 * 2.5 / n * (1 + 1e-5)).all() and moved.max() > 1.9 * 2.5 / n


def test_the_engine_averages_each_teachers_normalised_rows(monkeypatch):
    """The engine's pre-noise rows for three teachers are the mean of each one's normalised rows, and the event records
    the three (a release the accountant can replay with the right sensitivity)."""
    from dpconvert.mechanisms import dpdfd as engine

    teachers = _digits_teachers(3)
    ensemble = _ensemble(teachers)
    job = _job(ensemble)
    x = job.probe_inputs(64)
    s = job.model(x)
    rows = job._rows(x, s)
    expected = torch.stack([job.mechanism.normalise(engine.per_sample_output_gradient(s, t(x), job.cfg)) for t in teachers]).mean(0)
    assert torch.allclose(rows, expected, atol=1e-6)
    job.release(1)
    assert job.accountant.events[-1].params["teachers"] == 3


def _digits_teachers(n: int) -> list:
    from dpconvert.io.teachers import load_teacher

    base = load_teacher("builtin:digits")
    out = []
    for i in range(n):
        module = _perturbed(base.module, i)
        out.append(lambda x, m=module: m(x))
    return out


def _perturbed(module, seed: int):
    import copy

    m = copy.deepcopy(module).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=g) if p.numel() > 1 else 0)
    return m


def _ensemble(members: list):
    from dpconvert.io.teacher_set import TeacherSet
    from dpconvert.io.teachers import load_teacher

    base = load_teacher("builtin:digits")
    wrapped = [type(base)(forward=m, spec=base.spec, kind="test", source=f"t{i}", description="t") for i, m in enumerate(members)]
    return TeacherSet(forward=lambda x: torch.stack([m(x) for m in members]).mean(0), spec=base.spec, kind="ensemble", source="set",
                      description="set", members=wrapped)


def _job(teacher):
    from tests.engine import engine_config
    from dpconvert.generators import create_generator
    from dpconvert.mechanisms.dpdfd import Dpdfd
    from dpconvert.students import create_student

    spec = teacher.spec
    cfg = engine_config(releases=1, batch_size=256, sigma=2.0, student_epochs=1, seed=0)
    return Dpdfd(teacher, create_student("datalens_cnn", spec), None, cfg, DisjointTeachersDpdfdAccountant(),
                 prior=create_generator("random_fields", spec), noise=torch.Generator().manual_seed(1))


# ------------------------------------------------------------------ the command line, the card and the audit
@pytest.fixture(scope="module")
def teacher_files(tmp_path_factory):
    """Three digits teachers saved as safetensors files (the built-in one, perturbed), in a folder with a list file."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    import dpconvert.builtin as builtin

    folder = tmp_path_factory.mktemp("teachers")
    src = str(builtin.__path__[0]) + "/digits_teacher.safetensors"
    with safe_open(src, "pt") as f:
        meta = f.metadata()
    state = load_file(src)
    for i in range(3):
        g = torch.Generator().manual_seed(i)
        save_file({k: (v + 0.05 * v.std() * torch.randn(v.shape, generator=g) if v.is_floating_point() and v.numel() > 1 else v).contiguous()
                   for k, v in state.items()}, str(folder / f"t{i}.safetensors"), metadata=meta)
    (folder / "teachers.txt").write_text("# one a line\nt0.safetensors\nt1.safetensors\nt2.safetensors\n")
    return folder


@pytest.mark.slow
def test_three_teachers_on_disjoint_partitions_convert_to_a_record_level_card(teacher_files, tmp_path, cli):
    from dpconvert.auditing.card_checks import check_card

    out = tmp_path / "s.onnx"
    files = [teacher_files / f"t{i}.safetensors" for i in range(3)]
    code, _, err = cli(*files, "--eps", "8", "--disjoint-partitions", "3", "--batch-size", "2000", "--epochs", "1", "--out", out)
    assert code == 0, err
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    g, t, m = card["guarantee"], card["teacher"], card["mechanism"]
    assert g["scope"] == "record" and g["epsilon"] == pytest.approx(8.0, rel=1e-5) and g["record_level_epsilon"] == g["epsilon"]
    assert card["accounting"]["accountant"] == "dpdfd_disjoint_teachers" and m["teachers"] == 3 and m["disjoint_partitions"] is True
    assert [x["source"] for x in t["members"]] == [str(f) for f in files] and t["disjoint_partitions"] is True
    assert all(len(x["sha256"]) == 64 for x in t["members"])
    mu = 2 * math.sqrt(2000) / (3 * m["sigma"])  # recomputed from the card by hand
    assert _gaussian_delta(g["epsilon"], mu) <= g["delta"] * (1 + 1e-6)
    assert cli("audit", out)[0] == 0
    forgeries = (
        (lambda c: c["accounting"]["state"]["events"][0]["params"].update(teachers=30), "teacher.members"),
        (lambda c: c["teacher"].update(disjoint_partitions=False), "teacher.disjoint_partitions"),
        (lambda c: c["mechanism"].update(teachers=30), "mechanism.teachers"),
        (lambda c: c["teacher"].update(members=c["teacher"]["members"][:2]), "teacher.members"),
        (lambda c: c["guarantee"].update(query_level_epsilon=1e-6), "guarantee.query_level_epsilon"),
    )
    for edit, field in forgeries:
        forged = json.loads(json.dumps(card))
        edit(forged)
        assert any(w == field for w, _ in check_card(forged)[1]), field


def test_a_one_teacher_card_cannot_claim_the_disjoint_bound(tmp_path, cli):
    from dpconvert.auditing.card_checks import check_card

    out = tmp_path / "s.onnx"
    assert cli("builtin:digits", "--eps", "1", "--batch-size", "1500", "--epochs", "1", "--out", out)[0] == 0
    card = json.loads((tmp_path / "s.onnx.card.json").read_text())
    forged = json.loads(json.dumps(card))
    forged["accounting"]["accountant"] = forged["accounting"]["state"]["accountant"] = "dpdfd_disjoint_teachers"
    fields = {w for w, _ in check_card(forged)[1]}
    assert {"guarantee.scope", "mechanism.disjoint_partitions", "accounting.state.events"} <= fields


def test_a_folder_or_a_list_file_names_the_teachers(teacher_files):
    from dpconvert.io.teacher_set import expand_teacher_sources, load_teachers

    files = [str(teacher_files / f"t{i}.safetensors") for i in range(3)]
    assert expand_teacher_sources(str(teacher_files)) == files
    assert expand_teacher_sources(str(teacher_files / "teachers.txt")) == files
    s = load_teachers(str(teacher_files))
    x = torch.randn(4, *s.spec.shape)
    assert torch.allclose(s(x), torch.stack([m(x) for m in s.members]).mean(0))


def test_the_same_model_twice_is_refused(teacher_files, tmp_path, cli):
    """A copy of one teacher under another name would count one partition twice (its records would move 2 of the n)."""
    import shutil

    shutil.copy(teacher_files / "t0.safetensors", tmp_path / "copy.safetensors")
    code, _, err = cli(teacher_files / "t0.safetensors", teacher_files / "t1.safetensors", tmp_path / "copy.safetensors",
                       "--disjoint-partitions", "3", "--eps", "1", "--out", tmp_path / "s.onnx")
    assert code == 1 and "are the same model" in err and not (tmp_path / "s.onnx").exists()


@pytest.mark.parametrize("args,needle", [
    (["--disjoint-partitions", "2"], "says 2 teachers"),
    (["--method", "dpsgd", "--private-data", "builtin:digits:train"], "distilled by dpdfd only"),
])
def test_mismatched_teacher_counts_and_other_methods_are_one_line_errors(teacher_files, tmp_path, cli, args, needle):
    code, _, err = cli(teacher_files, "--eps", "1", "--out", tmp_path / "s.onnx", *args)
    assert code == 1 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())
