"""The maintained benchmark scripts still run (at tiny sizes, offline, on the bundled digits): a script RESULTS.md
cites as the command behind a number must not rot between measurements. Their numbers are measured, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(args, tmp_path) -> dict:
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, *args, "--json", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_run_dpdfd_smoke(tmp_path):
    rows = _run([ROOT / "benchmarks/run_dpdfd.py", "--eps", "1", "--batch-size", "3000", "--epochs", "1", "--seed", "0"], tmp_path)
    assert rows[-1]["epsilon"] <= 1.0 + 1e-9 and 0 <= rows[-1]["student_accuracy"] <= 1 and rows[-1]["command"].startswith("python benchmarks/run_dpdfd.py")


@pytest.mark.slow
def test_digits_default_smoke(tmp_path):
    rows = _run([ROOT / "benchmarks/digits_default.py", "--batch-size", "3000", "--epochs", "1", "--seeds", "0"], tmp_path)
    assert rows and all("accuracy" in json.dumps(r) for r in rows)


@pytest.mark.slow
def test_resnet34_methods_smoke(tmp_path):
    """The script behind RESULTS' ResNet-34 table, on the built-in teacher and the digits (each run is the CLI)."""
    rows = _run([ROOT / "benchmarks/resnet34_methods.py", "--teacher", "builtin:digits", "--private", "builtin:digits:train", "--public",
                 "builtin:digits", "--evaluation", "builtin:digits", "--runs", "dpsgd,pknn", "--eps", "8", "--extra", "--epochs 1"], tmp_path)
    assert [r["method"] for r in rows] == ["dpsgd", "pknn"] and all(r["epsilon"] <= 8 + 1e-9 and r["peak_rss_mib"] > 0 for r in rows)
    assert rows[0]["command"].startswith("dpconvert builtin:digits --eps 8")


@pytest.mark.slow
def test_disjoint_teachers_smoke(tmp_path):
    """The script behind RESULTS' disjoint-teachers table, on the digits: 3 teachers on 3 parts, one record-level run."""
    rows = _run([ROOT / "benchmarks/disjoint_teachers.py", "--partitions", "3", "--eps", "8", "--batch-size", "1000", "--min-epochs", "1",
                 "--private", "builtin:digits:train", "--input-size", "1,8,8", "--public", "builtin:digits", "--evaluation", "builtin:digits",
                 "--runs", str(tmp_path), "--extra", "--epochs 1"], tmp_path)
    [row] = rows
    assert row["scope"] == "record" and row["epsilon"] <= 8 + 1e-9 and row["audit_passed"] and row["partitions"] == 3
    assert row["command"].startswith("dpconvert ") and "--disjoint-partitions 3" in row["command"]


@pytest.mark.slow
def test_inversion_audit_smoke(tmp_path):
    """The script behind RESULTS' inversion row, on the built-in teacher and the digits."""
    [row] = _run([ROOT / "benchmarks/inversion_audit.py", "--teacher", "builtin:digits", "--private", "builtin:digits:train",
                  "--convert", "--eps 1 --batch-size 2000 --epochs 1"], tmp_path)
    assert row["teacher_confidence"] > 0.9 and row["model_ratio"] > 0 and row["audit_command"].startswith("dpconvert audit")


@pytest.mark.slow
def test_dp_critic_layer_smoke(tmp_path):
    """The script behind RESULTS' DP-critic-layer rows (the paper's layer, measured, not shipped), on the digits: no ε in the row."""
    [row] = _run([ROOT / "benchmarks/dp_critic_layer.py", "--private", "builtin:digits:train", "--evaluation", "builtin:digits", "--input-size",
                  "1,8,8", "--steps", "5", "--samples", "300"], tmp_path)
    assert row["epsilon"] is None and "no accountant" in row["why_no_epsilon"] and 0 <= row["synthetic_to_real_accuracy"] <= 1
    assert row["empirical_ex_post"]["computed_on_private_data"] and row["command"].startswith("python benchmarks/dp_critic_layer.py")


@pytest.mark.slow
def test_data_free_sim_smoke(tmp_path):
    """The design simulation behind RESULTS table 15 (per-image targets with simulated release noise), at tiny sizes."""
    out = tmp_path / "r.jsonl"
    r = subprocess.run([sys.executable, ROOT / "benchmarks/data_free_sim.py", "--teacher", "builtin:digits", "--eval-data", "builtin:digits",
                        "--prior", "random_fields", "--images", "60", "--rows", "6000", "--clean-views", "2", "--student-samples", "600",
                        "--pool", "4", "--shrink", "--loss", "ce", "--cache", str(tmp_path / "cache"), "--json", str(out)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    row = json.loads(out.read_text().splitlines()[-1])
    assert row["images"] == 60 and row["loss"] == "ce"
    assert 0 <= row["accuracy"] <= 1 and 0 <= row["pooled_accuracy"] <= 1 and 0 <= row["shrunk_accuracy"] <= 1


@pytest.mark.slow
def test_prior_trial_sim_smoke(tmp_path):
    """The simulation behind the prior trial's choice rate (RESULTS table 15), on a two-family mixture cached by the design
    simulation at tiny sizes."""
    cache = tmp_path / "cache"
    r = subprocess.run([sys.executable, ROOT / "benchmarks/data_free_sim.py", "--teacher", "builtin:digits", "--eval-data", "builtin:digits",
                        "--prior", "framed_fields+natural_crops", "--images", "40", "--rows", "4000", "--clean-views", "2", "--student-samples",
                        "400", "--denoise", "none", "--cache", str(cache)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [cached] = cache.glob("*framed_fields+natural_crops_40_*.pt")
    r = subprocess.run([sys.executable, ROOT / "benchmarks/prior_trial_sim.py", str(cached), "--images", "10", "--views", "50", "--draws", "5"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "10 images × 50 views per family: chosen framed_fields" in r.stdout and "natural_crops" in r.stdout


@pytest.mark.slow
def test_teacher_runtime_speed_smoke(tmp_path):
    """The script behind RESULTS' teacher-runtime rows, on the built-in teacher."""
    [row] = _run([ROOT / "benchmarks/teacher_runtime_speed.py", "--teachers", "builtin:digits"], tmp_path)
    assert row["runtime"].startswith("onnxruntime") and row["torch_rows_per_s"] > 0 and row["runtime_rows_per_s"] > 0


@pytest.mark.slow
def test_release_speed_smoke(tmp_path):
    """The script behind RESULTS' "Where the release's time goes" rows, on the built-in teacher."""
    [row] = _run([ROOT / "benchmarks/release_speed.py", "--teacher", "builtin:digits", "--rows", "3000"], tmp_path)
    assert row["queries_us_per_row"] > 0 and row["teacher_phase_group_us_per_row"] > 0 and row["rows_per_group"] >= row["rows_per_call"]
    assert set(row["grid_us_per_view"]) == {"torch_affine_grid", "sampling_grid"}
