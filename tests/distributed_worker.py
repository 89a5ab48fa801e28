"""Run by tests/test_distributed.py under ``torchrun --standalone --nproc_per_node N``: the sharded mechanisms on fixed
inputs, each rank's results saved to OUT/rank{r}.pt (and, with N = 1 and no torchrun, the one-process reference)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from dpconvert.accounting import DpdfdAccountant, PknnAccountant
from dpconvert.distributed import finish, init_from_env
from dpconvert.mechanisms.gaussian_release import NormalisedGaussianRelease
from dpconvert.mechanisms.private_knn import PknnMechanism

ROWS, CLASSES, RECORDS, QUERIES = 1001, 10, 601, 70  # odd sizes: the shards differ by one


def inputs():
    g = torch.Generator().manual_seed(7)
    grads = torch.randn(ROWS, CLASSES, generator=g)
    pfeats, qfeats = torch.randn(RECORDS, 6, generator=g), torch.randn(QUERIES, 6, generator=g)
    labels = torch.randint(0, CLASSES, (RECORDS,), generator=g)
    return grads, pfeats, qfeats, labels


def main(out: Path) -> None:
    world, _ = init_from_env("cpu")
    grads, pfeats, qfeats, labels = inputs()
    mine, records = world.shard(ROWS), world.shard(RECORDS)
    result = {}
    for replicated in (True, False):
        stream = torch.Generator().manual_seed(3) if replicated else torch.Generator().manual_seed(100 + world.rank)  # secret: per rank
        acc = DpdfdAccountant()
        mech = NormalisedGaussianRelease(sigma=2.0, clip=1.0, accountant=acc, generator=stream, world=world, replicated_stream=replicated)
        result[f"release_{replicated}"] = mech.release(grads[mine], total=ROWS)
        result[f"events_{replicated}"] = [dict(e) for e in acc.state_dict()["events"]]
        pacc = PknnAccountant()
        knn = PknnMechanism(labels[records], CLASSES, k=25, sampling_rate=0.4, sigma1=3.0, threshold=8.0, sigma2=2.0, accountant=pacc,
                            generator=torch.Generator().manual_seed(5) if replicated else torch.Generator().manual_seed(200 + world.rank),
                            chunk=32, world=world, num_records=RECORDS, replicated_stream=replicated)
        answered = knn.screen(qfeats, pfeats[records])
        result[f"answered_{replicated}"] = answered
        result[f"histogram_{replicated}"] = knn.noisy_histogram(qfeats[answered], pfeats[records])
        result[f"pknn_events_{replicated}"] = [dict(e) for e in pacc.state_dict()["events"]]
    torch.save(result, out / f"rank{world.rank}.pt")
    finish()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
