"""A DPDFD query generator saved with ``--save-generator`` and reused as a Private-kNN query source.

The file is safetensors: the generator's weights, plus metadata that say how
to rebuild it (registry name, input spec) and what producing it cost. A DPDFD
generator is trained only against the student, i.e. it is post-processing of
the noisy releases, so its privacy cost is exactly that run's DPDFD accountant
(query-level; the record-level worst case follows from the same events). The
events travel with the weights so that a later Private-kNN run can compose
them into its own card (docs/privacy.md) and ``audit`` can recompute both.
"""

from __future__ import annotations

import json
import hashlib
from dataclasses import asdict, dataclass, field
from typing import Optional
from pathlib import Path

import torch

from dpconvert.errors import DpconvertError

FORMAT = "dpconvert-generator/1"
# The DPDFD mechanism facts a generator's cost carries onto a composed card (checked there against its events).
COST_MECHANISM_KEYS = ("sigma", "clip", "batch_size", "releases", "query_source", "noise_rng", "noise_secret", "distinct_inputs")


@dataclass
class GeneratorCost:
    """What the generator cost: the DPDFD accountant's events and the run's identity."""

    accountant_state: dict  # DpdfdAccountant.state_dict() of the run that trained it
    scope: str  # "query": the generator saw the teacher only through the DPDFD releases
    teacher_sha256: str | None
    card_epsilon: float  # ε of that run at card_delta (informative; recomputed from the events when composed)
    card_delta: float
    # The DPDFD run's mechanism facts that bear on its ε (sigma, clip, batch_size, releases, noise_secret, distinct_inputs,
    # query_source, noise_rng): copied onto the composed card, where the audit checks them against the events.
    mechanism: dict = field(default_factory=dict)


@dataclass
class SavedGenerator:
    generator: torch.nn.Module
    name: str
    spec: object  # InputSpec
    cost: GeneratorCost
    path: str


def generator_bytes(generator: torch.nn.Module, name: str, spec, cost: GeneratorCost) -> bytes:
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous() for k, v in generator.state_dict().items()}
    meta = {
        "format": FORMAT,
        "generator": name,
        "nz": str(generator.nz),
        "conditional": str(bool(generator.num_classes)),
        "spec": json.dumps({"channels": spec.channels, "height": spec.height, "width": spec.width, "num_classes": spec.num_classes,
                            "mean": list(spec.mean), "std": list(spec.std)}),
        "cost": json.dumps(asdict(cost)),
    }
    meta["sha256"] = content_sha256(tensors, meta)
    return save(tensors, metadata=meta)


def content_sha256(tensors: dict, meta: dict) -> str:
    """sha256 over the weights and every metadata entry (how to rebuild the generator and what it cost): editing the
    recorded cost, e.g. "200 releases at σ = 2" into "1 release at σ = 50", changes it as much as editing a weight.
    (A hash anyone can recompute catches edits, not forgers: the composed card carries the events and is signed.)"""
    h = hashlib.sha256(CONTENT_CONTEXT)
    h.update(weights_sha256(tensors).encode())
    h.update(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


CONTENT_CONTEXT = b"dpconvert-generator-content/1\n"


def weights_sha256(tensors: dict) -> str:
    """sha256 over the tensors (name, dtype, shape, bytes, in name order)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def load_saved_generator(path: str | Path) -> SavedGenerator:
    from safetensors import SafetensorError, safe_open

    from dpconvert.io.spec import InputSpec

    from . import create_generator

    path = Path(path)
    if not path.is_file():
        raise DpconvertError(f"{path}: no such generator file", fix=f"save one with `generator` dafl and `save_generator` {path.name}", param="generator")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise DpconvertError(f"{path}: not a safetensors generator file ({str(e).splitlines()[0]})") from None
    if meta.get("format") != FORMAT:
        raise DpconvertError(f"{path}: not a dpconvert generator (format {meta.get('format')!r}, expected {FORMAT!r})", fix="save it with `save_generator`", param="save_generator")
    if meta.get("sha256") != content_sha256(tensors, meta):
        raise DpconvertError(f"{path}: the weights or the recorded cost do not match the hash saved with them (changed after saving, "
                             "or saved by an older dpconvert)", fix="save the generator again with `save_generator`", param="save_generator")
    try:
        spec = InputSpec(**json.loads(meta["spec"]))
        cost = GeneratorCost(**json.loads(meta["cost"]))
        gen = create_generator(meta["generator"], spec, nz=int(meta["nz"]), conditional=meta["conditional"] == "True")
        gen.load_state_dict(tensors)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise DpconvertError(f"{path}: corrupt generator metadata or weights ({str(e).splitlines()[0][:160]})") from None
    return SavedGenerator(gen.eval(), meta["generator"], spec, cost, str(path))


@torch.no_grad()
def sample_labelled(generator: torch.nn.Module, n: int, num_classes: int, rng: torch.Generator,
                    batch: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """(n inputs G(z, c), their classes c): z ~ N(0, I), c balanced (chosen by us, public)."""
    z = torch.randn(n, generator.nz, generator=rng)
    labels = (torch.arange(n) % num_classes)[torch.randperm(n, generator=rng)]
    cond = bool(getattr(generator, "num_classes", None))
    generator.eval()
    return torch.cat([generator(zc, lc if cond else None) for zc, lc in zip(z.split(batch), labels.split(batch))]), labels


def sample_queries(generator: torch.nn.Module, n: int, num_classes: int, rng: torch.Generator, batch: int = 1024) -> torch.Tensor:
    """n inputs G(z, c) (the classes drawn as in :func:`sample_labelled` and dropped: the teacher labels queries)."""
    return sample_labelled(generator, n, num_classes, rng, batch)[0]


def dpdfd_generator_cost(accountant, teacher, delta: float, mechanism: dict):
    """What a DPDFD-trained generator cost: the run's events, its teacher, and the mechanism facts its ε rests on. The
    events are recorded for the composed accountant (a valid bound for any run; a card that reuses the generator
    composes its cost with other mechanisms' events), so the ε recorded is the composed one."""
    from dpconvert.accounting import DpdfdAccountant

    composed = DpdfdAccountant(events=list(accountant.events))
    return GeneratorCost(composed.state_dict(), "query", teacher.sha256, composed.epsilon(delta=delta), delta,
                         {k: mechanism[k] for k in COST_MECHANISM_KEYS})


def check_generator_path(path: str, out: Optional[Path], has_generator: bool, force: bool = False) -> None:
    from dpconvert.io.atomic import check_output

    p = Path(path)
    if not has_generator:
        raise DpconvertError("`save_generator` needs a learned generator", fix="add `generator` dafl (the default prior is data-independent; "
                             "Private-kNN can use it directly with `query_generator` prior)", param="save_generator")
    if p.suffix != ".safetensors":
        raise DpconvertError(fix=f"`save_generator` must end in .safetensors, got {p.name!r}", param="save_generator")
    if out is not None and p.resolve() == Path(out).resolve():
        raise DpconvertError(fix="`save_generator` and the output model must be different files", param="save_generator")
    check_output(p, param="save_generator", force=force)
