"""Model inversion, teacher against its DP student: what ``dpconvert audit --inversion`` recovers of the private records.

    python benchmarks/inversion_audit.py --json benchmarks/results/inversion_audit.json

A student is converted from the teacher with the ``dpconvert`` command a user types (by default data-free DPDFD at
ε = 1, seeded noise), then ``dpconvert audit STUDENT --inversion --members PRIVATE --teacher TEACHER`` recovers one
image per class from each and scores it by its distance to the nearest private record of its class (ratio < 1:
closer than the records are to each other). Evidence, not a guarantee.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import tempfile

from _results import report  # benchmarks/_results.py (the script's folder is on sys.path)
from run_pknn import DATA


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default="benchmarks/runs/fmnist_resnet34_64.safetensors")
    ap.add_argument("--private", default=f"{DATA}:train", help="the teacher's training records (the auditor's members)")
    ap.add_argument("--convert", default="--eps 1", help="dpconvert flags that make the student")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="append the result to this JSON list file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        make = ["dpconvert", args.teacher, *shlex.split(args.convert), "--seed", str(args.seed), "--seeded-noise", "--out", f"{d}/s.onnx"]
        subprocess.run(make, check=True, capture_output=True, text=True)
        audit = ["dpconvert", "audit", f"{d}/s.onnx", "--allow-seeded-noise", "--inversion", "--members", args.private, "--teacher",
                 args.teacher, "--json", f"{d}/r.json"]
        p = subprocess.run(audit, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(p.stderr[-2000:])
        result = json.load(open(f"{d}/r.json"))["model_inversion"][f"{d}/s.onnx"]
    report({"student_command": shlex.join(make).replace(d, "OUT"), "audit_command": shlex.join(audit).replace(d, "OUT"),
            **{f"{target}_{k}": v for target, r in result.items() for k, v in r.items() if k not in ("kind", "target")}}, args.json)


if __name__ == "__main__":
    main()
