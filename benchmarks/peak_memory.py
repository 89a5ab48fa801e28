"""Peak resident memory after each phase of one DPDFD conversion (public-image queries to the Fashion-MNIST CNN).

Peak RSS grows with the number of teacher calls through glibc's per-thread malloc arenas (benchmarks/RESULTS.md,
table 2). Run it with and without ``MALLOC_ARENA_MAX=1`` in the environment to compare:

    python benchmarks/peak_memory.py --batch-size 100000
    MALLOC_ARENA_MAX=1 python benchmarks/peak_memory.py --batch-size 100000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from pathlib import Path

from _results import append_row  # benchmarks/_results.py (the script's folder is on sys.path)


def main() -> None:
    import dpconvert.distill.rounds as rounds
    import dpconvert.mechanisms.dpdfd as engine
    import dpconvert.pipeline as pipeline
    from dpconvert import convert
    from dpconvert.profiling import peak_rss_mib, phase

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--teacher", default="benchmarks/runs/fmnist_cnn.safetensors")
    p.add_argument("--public-data", default="benchmarks/runs/mnist5k_ood.npz")
    p.add_argument("--batch-size", type=int, default=100_000)
    p.add_argument("--epochs", type=int, default=4, help="student passes over the public images, kept small: the release is what is measured")
    p.add_argument("--json")
    a = p.parse_args()
    after: dict[str, float] = {}

    @contextlib.contextmanager
    def traced(name, items=0):  # the profiler's phase, noting the peak RSS when each phase ends
        with phase(name, items):
            yield
        after[name] = peak_rss_mib()

    engine.phase = rounds.phase = pipeline.phase = traced
    with tempfile.TemporaryDirectory() as d:
        convert(a.teacher, out=Path(d) / "s.onnx", eps=1, seed=0, seeded_noise=True, public_data=a.public_data,
                batch_size=a.batch_size, epochs=a.epochs)
    row = {"batch_size": a.batch_size, "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX"), "peak_rss_mib_after": after,
           "command": f"{'MALLOC_ARENA_MAX=' + os.environ['MALLOC_ARENA_MAX'] + ' ' if 'MALLOC_ARENA_MAX' in os.environ else ''}"
                      f"python benchmarks/peak_memory.py --batch-size {a.batch_size}"}
    print(json.dumps(row))
    append_row(row, a.json)


if __name__ == "__main__":
    main()
