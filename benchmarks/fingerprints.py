"""Fingerprints of seeded conversions: a refactor that should change nothing must leave them bit-identical.

Runs nine configurations on the built-in digits teacher with `seeded_noise` (the DP noise drawn from the seed:
reproducible, not secret — a test-and-benchmark mode the card warns about) and prints, per configuration, the sha256
of the student's ONNX weights and of the card's guarantee, accounting and mechanism blocks (volatile fields — times,
versions, paths, dates — left out). Run it on two commits and compare:

    python benchmarks/fingerprints.py > /tmp/after.json
    git worktree add /tmp/before <commit> && (cd /tmp/before && pip install -q -e . && python benchmarks/fingerprints.py > /tmp/before.json)
    diff /tmp/before.json /tmp/after.json

Not a test: bit-identity holds on one machine with one torch build, not across them.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

PRIVATE = dict(private_data="builtin:digits:train")
CONFIGS = {  # name → convert's options (the teacher is builtin:digits)
    "dpdfd_default": dict(batch_size=20_000, epochs=1),
    "dpdfd_composed_2_releases": dict(batch_size=10_000, releases=2, accounting="composed", epochs=1),
    "dpdfd_noise_multiplier": dict(noise_multiplier=5.0, batch_size=10_000, epochs=1),
    "dpdfd_public_images": dict(public_data="builtin:digits:test", batch_size=10_000, epochs=1),
    "dpdfd_generator": dict(generator="dafl", releases=2, batch_size=5000, epochs=1),
    "pknn_public": dict(**PRIVATE, method="pknn", public_data="builtin:digits:test", eps=8.0, k=40, sampling_rate=0.3, sigma1=20, epochs=1),
    "pknn_prior_queries": dict(**PRIVATE, method="pknn", query_generator="prior", queries=400, eps=8.0, k=40, sampling_rate=0.3, sigma1=20,
                               epochs=1),
    "dpsgd": dict(**PRIVATE, method="dpsgd", epochs=1),
    "adlm": dict(**PRIVATE, method="adlm"),
}
VOLATILE = {"created", "elapsed_seconds", "libraries", "versions", "path", "date", "dpconvert_version", "seconds", "timings"}


def _stable(x):
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in sorted(x.items()) if k not in VOLATILE}
    if isinstance(x, list):
        return [_stable(v) for v in x]
    return x


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(_stable(obj), sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(name: str, options: dict, folder: Path) -> dict:
    import onnx
    import dpconvert

    out = folder / f"{name}.onnx"
    r = dpconvert.convert("builtin:digits", out=out, seed=0, seeded_noise=True, **options)
    weights = hashlib.sha256(b"".join(t.raw_data for t in sorted(onnx.load(str(out)).graph.initializer, key=lambda t: t.name))).hexdigest()[:16]
    card = r.card.data
    return {"student_weights": weights, "epsilon": card["guarantee"]["epsilon"], "guarantee": _sha(card["guarantee"]),
            "accounting": _sha(card["accounting"]), "mechanism": _sha(card["mechanism"])}


def main() -> None:
    only = set(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        result = {name: fingerprint(name, opts, Path(tmp)) for name, opts in CONFIGS.items() if not only or name in only}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
