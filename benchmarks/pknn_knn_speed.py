"""Private-kNN vote speed: exact torch search (full Poisson mask) vs the faiss oversampled search.

    python benchmarks/pknn_knn_speed.py --records 60000,1000000 --queries 500 [--json benchmarks/results/pknn_knn_speed.json]

Synthetic 32-dimensional features (the size of the hog_pca features), k=300,
γ=0.1. Both searches are exact (tests/test_pknn.py checks it); this measures
time per query and the peak memory of the process.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch

from dpconvert.accounting import PknnAccountant
from dpconvert.mechanisms.private_knn import PknnMechanism


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default="60000,1000000")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--knn", default="exact,faiss")
    ap.add_argument("--json")
    args = ap.parse_args()
    if "," in args.records or "," in args.knn:  # one process per setting, so peak memory is that setting's own
        import subprocess
        import sys

        rows = []
        for n in args.records.split(","):
            for knn in args.knn.split(","):
                res = subprocess.run([sys.executable, __file__, "--records", n, "--knn", knn, "--queries", str(args.queries), "--dim", str(args.dim)],
                                     check=True, capture_output=True, text=True)
                rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
        return
    rows = []
    for n in (int(v) for v in args.records.split(",")):
        g = torch.Generator().manual_seed(0)
        pfeats = torch.nn.functional.normalize(torch.randn(n, args.dim, generator=g), dim=1)
        q = torch.nn.functional.normalize(torch.randn(args.queries, args.dim, generator=g), dim=1)
        labels = torch.randint(0, 10, (n,), generator=g)
        for knn in args.knn.split(","):
            m = PknnMechanism(labels, 10, k=300, sampling_rate=0.1, sigma1=50, threshold=150, sigma2=45, accountant=PknnAccountant(),
                              generator=torch.Generator().manual_seed(1), chunk=64 if n > 200_000 else 256, knn=knn)
            t0 = time.perf_counter()
            votes = m.votes(q, pfeats)
            dt = time.perf_counter() - t0
            assert (votes.sum(1) == 300).all()
            row = {"records": n, "knn": knn, "queries": args.queries, "seconds": round(dt, 2), "ms_per_query": round(1000 * dt / args.queries, 2),
                   "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
            print(json.dumps(row), flush=True)
            rows.append(row)


if __name__ == "__main__":
    main()
