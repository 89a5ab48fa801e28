"""Several processes (torchrun, gloo on CPU) as one conversion: the same release, votes, card and student as one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dpconvert.distributed import LOCAL, World

HERE = Path(__file__).parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}


def _run(cmd: list, cwd: Path) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


# ------------------------------------------------------------------ the world's arithmetic (one process)
def test_shards_cover_every_item_once_in_rank_order():
    for n in (0, 1, 2, 7, 1001):
        for size in (1, 2, 3, 8):
            parts = [World(r, size).bounds(n) for r in range(size)]
            assert parts[0][0] == 0 and parts[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
            assert max(hi - lo for lo, hi in parts) - min(hi - lo for lo, hi in parts) <= 1


def test_minibatch_parts_scale_to_the_whole_minibatch_mean():
    """DDP averages the ranks' gradients of scale_r·mean_r: every item must weigh 1/n, n the whole minibatch."""
    order = torch.randperm(1003)
    for size in (2, 3):
        per_rank = [list(World(r, size).minibatches(order, 256)) for r in range(size)]
        assert all(len(p) == len(per_rank[0]) for p in per_rank)  # every rank steps alike
        start = 0
        for step in zip(*per_rank):
            parts = [p for p, _ in step]
            n = sum(len(p) for p in parts)
            assert torch.equal(torch.cat(parts), order[start:start + n])  # the minibatch, split in rank order
            start += n
            for part, scale in step:
                assert scale / (size * len(part)) == pytest.approx(1 / n)
        assert start == len(order)
    assert list(LOCAL.minibatches(order, 256))[-1][0].tolist() == order[768:].tolist()  # one process: unchanged


def test_minibatches_smaller_than_the_world_are_skipped_by_every_rank():
    order = torch.arange(5)
    assert [len(p) for p, _ in World(0, 2).minibatches(order, 4)] == [2]  # the last minibatch (1 item) is skipped
    assert [len(p) for p, _ in World(1, 2).minibatches(order, 4)] == [2]


def test_methods_that_run_in_one_process_refuse_torchrun(tmp_path):
    from dpconvert.errors import DpconvertError
    from dpconvert.methods import METHODS
    from dpconvert.options import RunOptions

    run = RunOptions(method="dpsgd", private_data="builtin:digits:train")
    with pytest.raises(DpconvertError, match="one process only"):
        METHODS.get("dpsgd").check_distributed(run, METHODS.get("dpsgd").options({}))
    pknn = METHODS.get("pknn")
    with pytest.raises(DpconvertError, match="canaries"):
        pknn.check_distributed(RunOptions(method="pknn", private_data="x", public_data="y"), pknn.options({"canaries": 10}))
    pknn.check_distributed(RunOptions(method="pknn", private_data="x", public_data="y"), pknn.options({}))  # supported


# ------------------------------------------------------------------ the mechanisms across 2 processes
@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    _run([sys.executable, HERE / "distributed_worker.py", one], HERE.parent)
    _run([*TORCHRUN, HERE / "distributed_worker.py", two], HERE.parent)
    return torch.load(one / "rank0.pt"), [torch.load(two / f"rank{r}.pt") for r in range(2)]


@pytest.mark.slow
def test_sharded_release_with_a_replicated_stream_is_the_one_process_release(sharded):
    """Seeded noise (tests only): each rank noises its rows with the noise one process would have drawn for them."""
    single, ranks = sharded
    for r in ranks:
        assert torch.equal(r["release_True"], single["release_True"])
        assert r["events_True"] == single["events_True"]  # one release of 1001 rows, as in one process
        assert r["events_True"][0]["params"]["batch_size"] == 1001 and r["events_True"][0]["count"] == 1


def test_sharded_release_with_secret_streams_noises_each_row_once(sharded):
    """Secret noise: every rank holds the same gathered release, each rank's rows carry its own stream's noise."""
    from tests.distributed_worker import ROWS, inputs

    single, (r0, r1) = sharded
    assert torch.equal(r0["release_False"], r1["release_False"])
    assert r0["events_False"] == single["events_False"]
    grads = inputs()[0]
    clean = grads / (grads.norm(dim=1, keepdim=True) + 1e-6)
    noise = (r0["release_False"] - clean) / 2.0
    lo = World(1, 2).bounds(ROWS)[0]
    rank0 = torch.Generator().manual_seed(100)  # the worker's stand-ins for the secret streams
    assert torch.allclose(noise[:lo], torch.randn((lo, grads.shape[1]), generator=rank0), atol=1e-5)
    rank1 = torch.Generator().manual_seed(101)
    assert torch.allclose(noise[lo:], torch.randn((ROWS - lo, grads.shape[1]), generator=rank1), atol=1e-5)


def test_sharded_private_knn_gives_the_one_process_votes(sharded):
    """Records split across ranks, candidates merged: the same screening, the same noisy histograms, the same events."""
    single, ranks = sharded
    for r in ranks:
        assert torch.equal(r["answered_True"], single["answered_True"])
        assert torch.equal(r["histogram_True"], single["histogram_True"])
        assert r["pknn_events_True"] == single["pknn_events_True"]
    assert 0 < int(single["answered_True"].sum()) < len(single["answered_True"])  # the screening both answered and refused
    r0, r1 = ranks  # secret streams: the shared noise is rank 0's, so every rank holds the same answers
    assert torch.equal(r0["answered_False"], r1["answered_False"]) and torch.equal(r0["histogram_False"], r1["histogram_False"])


# ------------------------------------------------------------------ the CLI under torchrun (bar of the scale-out issue)
def _outputs(path: Path, x: np.ndarray):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path))
    return json.loads(Path(f"{path}.card.json").read_text()), s.run(None, {s.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("flags", [
    ["--batch-size", "20000", "--epochs", "2"],
    ["--method", "pknn", "--private-data", "builtin:digits:train", "--public-data", "builtin:digits:test", "--k", "40",
     "--sampling-rate", "0.3", "--sigma1", "20", "--epochs", "3", "--eps", "4", "--delta", "1e-4"],
], ids=["dpdfd", "pknn"])
@pytest.mark.slow
def test_torchrun_conversion_writes_the_one_process_card_and_student(flags, tmp_path):
    """Seeded noise and a student without batch statistics (ScatterNet + GroupNorm): two processes give the card and
    the student of one process. (BatchNorm students differ by each rank's batch statistics; SyncBatchNorm is CUDA-only.)"""
    exe = shutil.which("dpconvert")
    common = ["builtin:digits", *flags, "--seeded-noise", "--student", "scatternet_linear", "--seed", "3"]
    _run([exe, *common, "--out", tmp_path / "one.onnx"], tmp_path)
    r = _run([*TORCHRUN, "--no-python", exe, *common, "--out", tmp_path / "two.onnx"], tmp_path)
    assert r.stdout.count("dpconvert summary") == 1  # rank 0 reports, rank 1 stays quiet
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{s}{ext}" for s in ("one", "two") for ext in (".onnx", ".onnx.card.json", ".onnx.card.md"))
    x = np.random.default_rng(0).random((300, 1, 8, 8), dtype=np.float32)
    card1, out1 = _outputs(tmp_path / "one.onnx", x)
    card2, out2 = _outputs(tmp_path / "two.onnx", x)
    assert card2["guarantee"] == card1["guarantee"]
    assert card2["accounting"]["state"] == card1["accounting"]["state"]
    assert card2["run"]["processes"] == {"world_size": 2, "backend": "gloo", "launcher": "torchrun"}
    assert np.abs(out1 - out2).max() < 1e-4
