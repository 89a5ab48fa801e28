"""Several processes (torchrun) as one conversion: who this process is, its share of the work, and the few collectives.

Launched by ``torchrun`` (``WORLD_SIZE`` > 1 in the environment), ``init_from_env`` joins the process group: gloo
on CPU, NCCL on CUDA (each rank on its ``LOCAL_RANK`` GPU). Without torchrun the world is one process and every
helper here is the identity, so the single-process code path is the same code.

What is split, and why the guarantee does not change (docs/methods.md, "Several processes"):

- DPDFD: every rank draws the same (data-independent) queries from the seed; rank r answers rows ``shard(B)`` —
  teacher forward, normalisation and the Gaussian noise of those rows only — and the noisy rows are gathered, so
  each row is noised exactly once and the accountant sees one release of B rows, as in one process.
- Private-kNN: rank r holds records ``shard(n)`` of the private set and its Poisson bits; the candidates of all ranks
  are merged into the exact k nearest kept records, and the vote noise is drawn once (rank 0) and broadcast.
- The student trains with DistributedDataParallel: each rank takes its part of every minibatch and the loss is
  scaled so that the averaged gradient is the whole minibatch's.

Secret noise: each rank fills its own generator from its own ``os.urandom``, so no rank can reproduce another's noise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    backend: Optional[str] = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def bounds(self, n: int, rank: Optional[int] = None) -> tuple[int, int]:
        """[lo, hi) of rank's share of n items: contiguous, in rank order, sizes differing by at most one."""
        r = self.rank if rank is None else rank
        return n * r // self.size, n * (r + 1) // self.size

    def shard(self, n: int) -> slice:
        return slice(*self.bounds(n))

    def part(self, idx: torch.Tensor) -> tuple[Optional[torch.Tensor], float]:
        """(this rank's part of a minibatch, the loss scale that makes DDP's averaged gradient the whole minibatch's
        mean); (None, 0) for a minibatch with fewer items than ranks, which every rank then skips (never in one process)."""
        if not self.distributed:
            return idx, 1.0
        if len(idx) < self.size:
            return None, 0.0
        mine = idx[self.shard(len(idx))]
        return mine, self.size * len(mine) / len(idx)

    def minibatches(self, order: torch.Tensor, size: int):
        """``part`` of each minibatch of ``order`` (every rank walks the same minibatches)."""
        for idx in order.split(size):
            mine, scale = self.part(idx)
            if mine is not None:
                yield mine, scale

    def gather_rows(self, local: torch.Tensor, total: int) -> torch.Tensor:
        """Concatenate every rank's ``shard(total)`` rows in rank order (each rank holds ``local`` = its own rows)."""
        if not self.distributed:
            return local
        import torch.distributed as dist

        sizes = [hi - lo for lo, hi in (self.bounds(total, r) for r in range(self.size))]
        if len(local) != sizes[self.rank]:
            raise RuntimeError(f"rank {self.rank} holds {len(local)} rows, its share is {sizes[self.rank]}")
        width = max(sizes)
        pad = torch.zeros(width, *local.shape[1:], dtype=local.dtype, device=self._comm_device)
        pad[: len(local)] = local.to(self._comm_device)
        parts = [torch.empty_like(pad) for _ in range(self.size)]
        dist.all_gather(parts, pad)
        return torch.cat([p[:s] for p, s in zip(parts, sizes)]).to(local.device)

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``t`` as rank ``src`` holds it, on every rank."""
        if not self.distributed:
            return t
        import torch.distributed as dist

        buf = t.to(self._comm_device).contiguous()
        dist.broadcast(buf, src)
        return buf.to(t.device)

    @property
    def _comm_device(self) -> str:
        return f"cuda:{torch.cuda.current_device()}" if self.backend == "nccl" else "cpu"

    def wrap_for_training(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module DDP-wrapped when distributed (gradients averaged across ranks in backward), else itself."""
        if not self.distributed:
            return module
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [torch.cuda.current_device()] if self.backend == "nccl" else None
        return DistributedDataParallel(module, device_ids=device_ids)


LOCAL = World()


def current_world() -> World:
    """The world this process belongs to (one process unless the process group was initialised)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(), dist.get_backend())
    return LOCAL


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(device: str) -> tuple[World, str]:
    """(world, this rank's device): joins torchrun's process group when launched by it; otherwise one process."""
    if not launched_by_torchrun():
        return LOCAL, device
    import torch.distributed as dist

    if device.startswith("cuda"):
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return current_world(), device


def finish(*, failed: bool = False) -> None:
    """Leave the process group: after every rank is done (so rank 0's files are written before anyone exits), or at
    once when this rank failed (a barrier would wait for ranks that may be stuck in a collective; torchrun stops them).
    Exiting without this aborts the process (gloo's threads are still running)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if not failed:
            dist.barrier()
        dist.destroy_process_group()
