"""How long `dpconvert audit` takes on a zoo of 20 small ONNX students with cards.

    python benchmarks/audit_speed.py [--models 20]

Builds the zoo with 20 real conversions of the built-in teacher (different
seeds and ε, few rows each), then times `dpconvert audit ZOO --json` as a
subprocess (the whole CLI, imports included), three times.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from dpconvert import convert


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        zoo = Path(d) / "zoo"
        zoo.mkdir()
        for i in range(args.models):
            convert("builtin:digits", out=zoo / f"m{i:02d}.onnx", eps=0.5 + i, seed=i, releases=1, batch_size=500, epochs=1)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            r = subprocess.run(["dpconvert", "audit", str(zoo), "--json", str(Path(d) / "r.json")], capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads((Path(d) / "r.json").read_text())
    print(json.dumps({"models": len(report["models"]), "all_pass": report["passed"], "seconds": [round(t, 2) for t in times]}))


if __name__ == "__main__":
    main()
