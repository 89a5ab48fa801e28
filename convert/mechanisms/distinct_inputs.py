"""No input is answered twice in a DPDFD run: exact distinctness of queries, within a release and across releases.

The per-answer accountant's m_max = 1 rests on this (docs/privacy.md). A 64-bit hash of each input's bits groups
candidate copies; equal inputs always share a hash, and only inputs whose hash is shared are compared exactly, so no
copy is ever missed (a collision between different inputs costs a redraw, never a repeat).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from dpconvert.distill.models import batched
from dpconvert.errors import InternalError


def flat_inputs(x: torch.Tensor, amp: Optional[str] = None) -> torch.Tensor:
    """Rows as the teacher sees them, flattened; + 0.0 maps −0.0 to 0.0 (the same input to the teacher). Under bf16
    autocast the teacher computes on bf16-rounded inputs, so two float32 inputs that round alike are one input to it:
    they are compared after the same rounding."""
    flat = x.reshape(len(x), -1).float()
    if amp == "bf16":
        flat = flat.to(torch.bfloat16).float()
    return flat + 0.0


def first_occurrences(x: torch.Tensor) -> torch.Tensor:
    """Indices of the first copy of each distinct row (sample) of x, in their original order.

    Rows are compared by value (−0.0 equals 0.0). A 64-bit hash of each row's bits groups candidate copies in one 1-D
    sort; equal rows always share a hash, and only rows whose hash is shared are compared exactly, so the answer is
    the exact one (a hash collision between different rows costs time, never a missed copy). Sorting whole rows
    lexicographically (torch.unique(dim=0)) took ~2 s for a release of 300 000 8×8 inputs.
    """
    flat = flat_inputs(x)
    return first_by_hash(row_hash(flat), lambda idx: flat[idx])


def first_by_hash(h: torch.Tensor, rows: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``first_occurrences`` given each row's hash and a way to get the rows at some indices (flattened, −0.0 as 0.0)."""
    _, inverse, counts = torch.unique(h, return_inverse=True, return_counts=True)
    keep = torch.ones(len(h), dtype=torch.bool, device=h.device)
    shared = counts[inverse] > 1
    if shared.any():  # exact comparison among rows whose hash is shared (copies, or rare collisions)
        idx = shared.nonzero().squeeze(1)
        _, inv = torch.unique(rows(idx), dim=0, return_inverse=True)
        first = torch.full((int(inv.max()) + 1,), len(h), dtype=torch.long, device=h.device)
        first = first.scatter_reduce(0, inv, idx, "amin")
        keep[idx] = False
        keep[first] = True
    return keep.nonzero().squeeze(1)


_HASH_WEIGHTS: dict = {}


def row_hash(flat: torch.Tensor) -> torch.Tensor:
    """A fixed random linear hash (mod 2^64) of each row's float32 bit patterns."""
    d = flat.shape[1]
    if d not in _HASH_WEIGHTS:
        g = torch.Generator().manual_seed(0x5EED)
        _HASH_WEIGHTS[d] = torch.randint(1, 2**62, (d,), generator=g, dtype=torch.int64) | 1
    w = _HASH_WEIGHTS[d].to(flat.device)
    # in chunks: the int64 copy of a whole release of 28×28 inputs would be 8 bytes per pixel (6 GB for a million)
    return batched(lambda c: (c.contiguous().view(torch.int32).to(torch.int64) * w).sum(1), flat, 16384)


class AnsweredInputs:
    """The hashes of every input answered so far in the run, sorted: a later release never asks one again, so no input
    is answered twice and the per-answer accountant's m_max is 1 (accounting/accountant.py)."""

    def __init__(self) -> None:
        self.hashes = torch.empty(0, dtype=torch.int64)
        self.pending: Optional[torch.Tensor] = None  # the next release's hashes, between choosing and answering

    def fresh(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``keep`` (indices of distinct rows) without the rows whose input an earlier release already asked (by hash:
        equal inputs always share one, so no repeat is missed; a collision only costs a redraw)."""
        if not len(self.hashes):
            return keep
        return keep[~torch.isin(h[keep].cpu(), self.hashes)]

    def remember_pending(self) -> None:
        """The release's inputs join the answered set, before the teacher sees them: a repeat stops the run before
        anything is released (they were fresh by construction, so this never fires unless the code is wrong)."""
        h = self.pending.cpu()
        if torch.isin(h, self.hashes).any() or len(torch.unique(h)) != len(h):
            raise InternalError("an input would be answered twice in this run; nothing was released")
        self.hashes = torch.sort(torch.cat([self.hashes, h])).values
        self.pending = None
