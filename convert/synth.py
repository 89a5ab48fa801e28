"""`dpconvert synth`: a differentially private synthetic data set from the private data, with its card.

The DP-critic GAN (``methods/dpgan.py``) is trained on the private records at the whole ε; its samples —
class-balanced labels chosen by us, images in pixel space [0, 255] — are the release, so the card's guarantee is
the critic's (record-level, add/remove), by post-processing. The card is a data card (``zoo_cards/schemas/
data-card-1.0.json``): the same guarantee / accounting / mechanism blocks as a model card, a ``data`` block (the
file's sha256) instead of the model block, so ``dpconvert audit`` and ``card sign`` treat it like a model. It
carries no timing: the run read private data, and its duration grows with the private set.
"""

from __future__ import annotations

import io
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from .errors import DpconvertError
from .options import DEFAULT_DELTA, RunOptions

DATA_SHA256_METHOD = "sha256 of the .npz file's bytes"
CARD_METHOD = "dpgan"  # the data card's mechanism.method (its mechanism.config: the GAN's options), as `--generator` names it
ACCOUNTING_NOTE = {
    "embedding": "one Gaussian release of the class-conditional mean embedding (sensitivity 1 under add/remove), PLD (reported) and RDP",
    "dpsgd": "Poisson-subsampled Gaussian critic steps (DP-SGD, sensitivity C under add/remove), PLD (reported) and RDP",
}


def synthesize(private_data: str, *, out: str | Path, input_size: tuple[int, int, int], num_classes: int, eps: float = 1.0,
               delta: float = DEFAULT_DELTA, allow_large_delta: bool = False, samples: int = 10000, seed: int = 0, seeded_noise: bool = False,
               pixel_range: Optional[float] = None, grid: Optional[str | Path] = None, gan=None, command: Optional[str] = None,
               sign_key: Optional[str | Path] = None, class_names: Optional[list[str]] = None, force: bool = False, ex_post: bool = False,
               on_progress: Optional[Callable[[dict], None]] = None):
    """Train the DP-critic GAN on ``private_data`` at (ε, δ), write ``out`` (.npz: x uint8 N×C×H×W, y) and
    ``out.card.json`` (signed with ``sign_key`` if given; and ``grid``, a PNG of samples) all or nothing; return the
    card (a ``PrivacyCard`` of kind ``data``). ``ex_post``: also publish the ex-post expected privacy-loss estimate
    (``mechanisms/ex_post.py``) in the card's ``empirical`` block — computed on the private records outside the DP
    accounting, not DP, and said so on the card."""
    from .context import RunContext
    from .io.spec import InputSpec
    from .methods.dpgan import GanOptions, train_dpgan

    out, gan_opts = Path(out), gan or GanOptions()
    signing_key = _check_before_reading(out, grid, force, samples, num_classes, class_names, gan_opts, sign_key)
    run = RunOptions(eps=eps, delta=delta, allow_large_delta=allow_large_delta, private_data=private_data, seed=seed, seeded_noise=seeded_noise,
                     pixel_range=pixel_range, class_names=class_names)
    spec = InputSpec(*input_size, num_classes, mean=(0.0,) * input_size[0], std=(1.0,) * input_size[0])  # generator output = pixels
    ctx = RunContext.build(run, spec)
    result = train_dpgan(ctx, gan_opts, spec, eps, delta, on_progress)
    pixels, labels = _samples(result.generator, samples, num_classes, seed)
    empirical = None
    if ex_post:  # opt-in: a statistic of the private records published outside the accounting (the card warns)
        import numpy as np

        from .mechanisms.ex_post import expected_privacy_loss

        empirical = expected_privacy_loss(ctx.private, pixels.astype(np.float32) / 255.0, seed=seed)
    npz = _npz(pixels, labels)
    card = _data_card(out, npz, run, result, gan_opts, empirical, samples=samples, input_size=input_size, num_classes=num_classes, command=command,
                      signing_key=signing_key, noise_warnings=ctx.noise.warnings)
    from .io.atomic import AtomicOutputs
    from .zoo_cards import CARD_SUFFIX_JSON

    with AtomicOutputs() as outputs:
        outputs.write(out, npz)
        outputs.write(out.with_name(out.name + CARD_SUFFIX_JSON), card.to_json())
        if grid:
            outputs.write(grid, sample_grid(pixels, labels, num_classes, class_names=class_names))
    return card


def _check_before_reading(out: Path, grid, force: bool, samples: int, num_classes: int, class_names, gan_opts, sign_key):
    """Every check that needs no private record, before one is read; returns the loaded signing key (or None)."""
    from .io.atomic import check_output
    from .methods.dpgan import CRITICS

    if out.suffix != ".npz":
        raise DpconvertError(fix=f"`out` must end in .npz, got {out.name!r}", param="out")
    check_output(out, force=force, also=[out.with_name(out.name + ".card.json")])
    if grid:
        check_output(grid, param="grid", force=force)
    if samples < 1:
        raise DpconvertError(fix="`samples` must be >= 1", param="samples")
    if class_names is not None and len(class_names) != num_classes:
        raise DpconvertError(f"`class_names` lists {len(class_names)} classes but `num_classes` is {num_classes}", fix="list every class in label order", param="class_names")
    CRITICS.get(gan_opts.critic)  # an unknown critic fails here
    if sign_key is None:
        return None
    from .zoo_cards.signing import load_private_key

    return load_private_key(sign_key)


def _samples(generator, samples: int, num_classes: int, seed: int):
    """(uint8 pixels N×C×H×W, labels): ``samples`` images, class-balanced, each drawn for its label (post-processing)."""
    import torch

    from .generators.saved import sample_labelled

    x, labels = sample_labelled(generator, samples, num_classes, torch.Generator().manual_seed(seed))
    return (x.clamp(0, 1) * 255).round().to(torch.uint8).numpy(), labels.numpy()


def _npz(pixels, labels) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez_compressed(buf, x=pixels, y=labels)
    return buf.getvalue()


def _data_card(out: Path, npz: bytes, run: RunOptions, result, gan_opts, empirical, *, samples: int, input_size, num_classes: int, command,
               signing_key, noise_warnings: list):
    """The data card, through the same ``release_card`` as a model's: the critic's events are the guarantee."""
    import hashlib

    from .accounting import DpganAccountant
    from .accounting.card_blocks import Claims
    from .accounting.statements import COVERS_DATA, EX_POST_WARNING, NOT_COVERED_DATA
    from .release import release_card
    from .zoo_cards.card import DATA_CARD_FORMAT

    accountant = DpganAccountant().load_state_dict(result.accountant_state)
    claims = Claims(covers=list(COVERS_DATA), not_covered=list(NOT_COVERED_DATA), calibrated=True, target_epsilon=run.eps,
                    note=ACCOUNTING_NOTE[gan_opts.critic])
    identity = {"data": {"file": out.name, "sha256": hashlib.sha256(npz).hexdigest(), "sha256_method": DATA_SHA256_METHOD,
                         "samples": samples, "shape": list(input_size), "num_classes": num_classes,
                         "pixels": "uint8, 0..255", "labels": "class-balanced, chosen by the generator's user (public)"}}
    return release_card(identity=identity, accountant=accountant, delta=run.delta, target=run.eps, claims=claims,
                        mechanism={"method": CARD_METHOD, **result.mechanism, "config": {**asdict(gan_opts), "seed": run.seed}},
                        rest={"empirical": empirical} if empirical else {},
                        warnings=list(noise_warnings) + ([EX_POST_WARNING] if empirical else []), command=command, seed=run.seed,
                        card_format=DATA_CARD_FORMAT, signing_key=signing_key, what="generated data card")


def sample_grid(pixels, labels, num_classes: int, per_class: int = 10, class_names=None, cell: int = 48) -> bytes:
    """A PNG (torchvision's grid, Pillow's encoder): one row per class, ``per_class`` samples each, each sample
    enlarged to ``cell`` pixels (nearest neighbour: an 8×8 digit stays legible) and each row labelled with its class."""
    import numpy as np
    import torch
    from PIL import Image, ImageDraw
    from torchvision.utils import make_grid

    tiles = []
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)[:per_class]
        row = [torch.from_numpy(pixels[i]) for i in idx] + [torch.zeros(pixels.shape[1:], dtype=torch.uint8)] * (per_class - len(idx))
        tiles += row
    scale = max(1, cell // max(pixels.shape[2:]))
    big = torch.stack(tiles).repeat_interleave(scale, dim=2).repeat_interleave(scale, dim=3)
    grid = make_grid(big, nrow=per_class, padding=2, pad_value=128)
    image = Image.fromarray(grid.permute(1, 2, 0).numpy()).convert("RGB")
    names = [str(n) for n in class_names] if class_names else [str(c) for c in range(num_classes)]
    margin = 8 + 7 * max(len(n) for n in names)
    labelled = Image.new("RGB", (image.width + margin, image.height), "white")
    labelled.paste(image, (margin, 0))
    draw, row_height = ImageDraw.Draw(labelled), (image.height - 2) / num_classes
    for c, name in enumerate(names):
        draw.text((4, int(2 + c * row_height + row_height / 2 - 6)), name, fill="black")
    buf = io.BytesIO()
    labelled.save(buf, format="PNG")
    return buf.getvalue()
