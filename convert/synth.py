"""`dpconvert synth`: a differentially private synthetic data set from the private data, with its card.

The DP-critic GAN (``methods/dpgan.py``) is trained on the private records at the whole ε; its samples —
class-balanced labels chosen by us, images in pixel space [0, 255] — are the release, so the card's guarantee is
the critic's (record-level, add/remove), by post-processing. The card has the same guarantee / accounting /
mechanism blocks as a model card, so ``check_card`` recomputes it; a ``data`` block replaces the model block.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from .errors import DpconvertError
from .options import DEFAULT_DELTA, RunOptions

DATA_CARD_FORMAT = "dpconvert-data-card/1"
ACCOUNTING_NOTE = {
    "embedding": "one Gaussian release of the class-conditional mean embedding (sensitivity 1 under add/remove), PLD (reported) and RDP",
    "dpsgd": "Poisson-subsampled Gaussian critic steps (DP-SGD, sensitivity C under add/remove), PLD (reported) and RDP",
}


def synthesize(private_data: str, *, out: str | Path, input_size: tuple[int, int, int], num_classes: int, eps: float = 1.0,
               delta: float = DEFAULT_DELTA, samples: int = 10000, seed: int = 0, seeded_noise: bool = False,
               pixel_range: Optional[float] = None, grid: Optional[str | Path] = None, gan=None, command: Optional[str] = None,
               on_progress: Optional[Callable[[dict], None]] = None) -> dict:
    """Train the DP-critic GAN on ``private_data`` at (ε, δ), write ``out`` (.npz: x uint8 N×C×H×W, y) and
    ``out.card.json`` (and ``grid``, a PNG of samples) all or nothing; return the card."""
    import numpy as np
    import torch

    from .accounting import DpganAccountant, library_versions
    from .generators.saved import sample_labelled
    from .io.atomic import AtomicOutputs
    import hashlib

    from .io.spec import InputSpec
    from .methods.dpgan import CRITICS, GanOptions, train_dpgan

    out = Path(out)
    if out.suffix != ".npz":
        raise DpconvertError(f"`out` must end in .npz, got {out.name!r}")
    if samples < 1:
        raise DpconvertError("`samples` must be >= 1")
    run = RunOptions(eps=eps, delta=delta, private_data=private_data, seed=seed, seeded_noise=seeded_noise, pixel_range=pixel_range)
    spec = InputSpec(*input_size, num_classes, mean=(0.0,) * input_size[0], std=(1.0,) * input_size[0])  # generator output = pixels
    gan_opts = gan or GanOptions()
    CRITICS.get(gan_opts.critic)  # an unknown critic fails here, before the data is read
    t0 = time.perf_counter()
    result = train_dpgan(run, gan_opts, spec, eps, delta, on_progress)
    x, labels = sample_labelled(result.generator, samples, num_classes, torch.Generator().manual_seed(seed))  # each image's class
    pixels = (x.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    buf = io.BytesIO()
    np.savez_compressed(buf, x=pixels, y=labels.numpy())
    accountant = DpganAccountant().load_state_dict(result.accountant_state)
    eps_all = accountant.epsilons(delta=delta)
    card = {
        "format": DATA_CARD_FORMAT,
        "guarantee": {"epsilon": eps_all["epsilon"], "delta": delta, "scope": "record", "adjacency": accountant.adjacency,
                      "record_level_epsilon": eps_all["epsilon"],
                      "covers": ["the synthetic data set in this file and its sample grid", "any later use of them (post-processing)"],
                      "not_covered": ["the declared size, class count and sample count (public choices)",
                                      "hyper-parameter choices tuned on private data, if any were"]},
        "accounting": {"accountant": accountant.name, "epsilons": {k: v for k, v in eps_all.items() if k != "epsilon"}, "libraries": library_versions(),
                       "calibrated": True, "target_epsilon": eps, "state": accountant.state_dict(),
                       "note": ACCOUNTING_NOTE[gan_opts.critic]},
        "mechanism": {"method": "dp-critic-gan", **result.mechanism, "config": {**asdict(gan_opts), "seed": seed}},
        "data": {"file": out.name, "sha256": hashlib.sha256(buf.getvalue()).hexdigest(), "samples": samples, "shape": list(input_size), "num_classes": num_classes,
                 "pixels": "uint8, 0..255", "labels": "class-balanced, chosen by the generator's user (public)"},
        "run": {"command": command, "seconds": round(time.perf_counter() - t0, 1)},
    }
    with AtomicOutputs() as outputs:
        outputs.write(out, buf.getvalue())
        outputs.write(out.with_name(out.name + ".card.json"), json.dumps(card, indent=1, ensure_ascii=False) + "\n")
        if grid:
            outputs.write(grid, sample_grid(pixels, labels.numpy(), num_classes))
    return card


def sample_grid(pixels, labels, num_classes: int, per_class: int = 10) -> bytes:
    """A PNG (torchvision's grid, Pillow's encoder): one row per class, ``per_class`` samples each."""
    import numpy as np
    import torch
    from PIL import Image
    from torchvision.utils import make_grid

    tiles = []
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)[:per_class]
        row = [torch.from_numpy(pixels[i]) for i in idx] + [torch.zeros(pixels.shape[1:], dtype=torch.uint8)] * (per_class - len(idx))
        tiles += row
    grid = make_grid(torch.stack(tiles), nrow=per_class, padding=2, pad_value=128)
    buf = io.BytesIO()
    Image.fromarray(grid.permute(1, 2, 0).numpy()).save(buf, format="PNG")
    return buf.getvalue()


def check_data_card(card: dict):
    """(recomputed, problems) of a data card: the same checks as a model card's privacy blocks."""
    from .auditing.card_checks import check_card

    return check_card({k: v for k, v in card.items() if k not in ("data", "format", "run")})
