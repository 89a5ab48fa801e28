"""Image data readers: ImageFolder dirs, .npz, MNIST-format IDX dirs, builtin:digits.

Every reader yields pixels in [0, 1] at the data's own size; ``load_data``
then fits them to a classifier's ``InputSpec`` (channels, size, mean/std) and
says so in a log line when it had to convert.
"""

from __future__ import annotations

import gzip
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .errors import DpconvertError
from .registry import Registry

log = logging.getLogger("dpconvert")


@dataclass
class RawImages:
    pixels: np.ndarray  # (N, C, H, W) float32 in [0, 1]
    labels: Optional[np.ndarray]  # (N,) int64 or None
    description: str


@dataclass
class Dataset:
    x: "object"  # torch.Tensor (N, C, H, W) in the classifier's normalised input space
    y: "object"  # torch.Tensor (N,) int64 or None
    description: str

    def __len__(self) -> int:
        return int(self.x.shape[0])


# A reader claims a source by ``detect(source) -> bool`` and reads it.
READERS: Registry[tuple[Callable[[str], bool], Callable[[str], RawImages]]] = Registry("data reader")

DIGITS_TEST_FRACTION = 0.25
DIGITS_SPLIT_SEED = 0


def digits_split(split: str) -> RawImages:
    """scikit-learn's 8x8 digits with a fixed stratified train/test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(
        x, d.target, test_size=DIGITS_TEST_FRACTION, random_state=DIGITS_SPLIT_SEED, stratify=d.target
    )
    if split == "train":
        return RawImages(xtr, ytr.astype(np.int64), f"builtin:digits train split ({len(ytr)} images)")
    return RawImages(xte, yte.astype(np.int64), f"builtin:digits test split ({len(yte)} images)")


def _is_builtin(source: str) -> bool:
    return source.startswith("builtin:")


def _read_builtin(source: str) -> RawImages:
    name = source[len("builtin:"):]
    splits = {"digits": "test", "digits:test": "test", "digits:train": "train"}
    if name not in splits:
        raise DpconvertError(f"unknown built-in dataset {source!r}; use builtin:digits (test split) or builtin:digits:train")
    return digits_split(splits[name])


READERS.register("builtin")((_is_builtin, _read_builtin))


def _is_npz(source: str) -> bool:
    return source.endswith(".npz")


def _read_npz(source: str) -> RawImages:
    path = _existing(source)
    try:
        with np.load(path, allow_pickle=False) as f:
            if "x" not in f:
                raise DpconvertError(f"{source}: an .npz dataset needs an array named 'x' (and optionally 'y'); found {sorted(f.files)}")
            x = np.asarray(f["x"])
            y = np.asarray(f["y"]).astype(np.int64) if "y" in f else None
    except (OSError, ValueError) as e:
        raise DpconvertError(f"{source}: not a readable .npz file ({e}); save it with numpy.savez(path, x=..., y=...)") from None
    x = _to_nchw(x, source)
    if y is not None and len(y) != len(x):
        raise DpconvertError(f"{source}: 'x' has {len(x)} images but 'y' has {len(y)} labels; they must match")
    return RawImages(x, y, f"{path.name} ({len(x)} images)")


READERS.register("npz")((_is_npz, _read_npz))


def _to_nchw(x: np.ndarray, source: str) -> np.ndarray:
    if x.ndim == 3:  # N,H,W
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):  # N,H,W,C
        x = x.transpose(0, 3, 1, 2)
    elif x.ndim != 4:
        raise DpconvertError(f"{source}: 'x' must be N,H,W or N,C,H,W or N,H,W,C; got shape {x.shape}")
    x = x.astype(np.float32)
    if x.size and x.max() > 1.0:  # stored as 0..255
        x = x / 255.0
    return x


_IDX_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _idx_file(directory: Path, stem: str) -> Optional[Path]:
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.exists():
            return candidate
    return None


def _is_idx(source: str) -> bool:
    directory, _ = _idx_split(source)
    return directory.is_dir() and any(_idx_file(directory, names[0]) for names in _IDX_NAMES.values())


def _idx_split(source: str) -> tuple[Path, str]:
    """``DIR`` means the test split; ``DIR:train`` / ``DIR:test`` pick one."""
    for split in ("train", "test"):
        if source.endswith(f":{split}"):
            return Path(source[: -len(split) - 1]), split
    return Path(source), "test"


def _read_idx_array(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
        zero, dtype, ndim = struct.unpack(">HBB", data[:4])
        if zero != 0 or dtype != 0x08:
            raise ValueError("bad magic number")
        shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    except (OSError, ValueError, struct.error, EOFError) as e:
        raise DpconvertError(f"{path}: not a valid IDX file ({e}); re-download the dataset") from None


def _read_idx(source: str) -> RawImages:
    directory, split = _idx_split(source)
    img_name, lbl_name = _IDX_NAMES[split]
    img_path = _idx_file(directory, img_name)
    if img_path is None:
        raise DpconvertError(f"{directory}: no {img_name}[.gz] for the {split} split")
    x = _read_idx_array(img_path).astype(np.float32)[:, None] / 255.0
    lbl_path = _idx_file(directory, lbl_name)
    y = _read_idx_array(lbl_path).astype(np.int64) if lbl_path else None
    return RawImages(x, y, f"{directory.name} {split} split ({len(x)} images, IDX)")


READERS.register("idx")((_is_idx, _read_idx))


_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def _is_image_folder(source: str) -> bool:
    p = Path(source)
    return p.is_dir() and any(c.is_dir() for c in p.iterdir())


def _read_image_folder(source: str) -> RawImages:
    from PIL import Image

    root = Path(source)
    classes = sorted(c.name for c in root.iterdir() if c.is_dir())
    images, labels = [], []
    for idx, name in enumerate(classes):
        for f in sorted((root / name).rglob("*")):
            if f.suffix.lower() in _IMAGE_SUFFIXES:
                try:
                    img = Image.open(f)
                    img = img.convert("L" if img.mode in ("L", "1", "I;16", "I") else "RGB")
                except OSError as e:
                    raise DpconvertError(f"{f}: cannot read image ({e}); remove or fix the file") from None
                a = np.asarray(img, dtype=np.float32) / 255.0
                images.append(a[None] if a.ndim == 2 else a.transpose(2, 0, 1))
                labels.append(idx)
    if not images:
        raise DpconvertError(f"{source}: no images found; an ImageFolder has one sub-folder per class with image files inside")
    shapes = {i.shape for i in images}
    if len(shapes) > 1:
        target = max(shapes)
        images = [_resize_np(i, target) for i in images]
    return RawImages(np.stack(images), np.asarray(labels, dtype=np.int64), f"{root.name} ImageFolder ({len(images)} images, {len(classes)} classes)")


def _resize_np(a: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(a)[None]
    if t.shape[1] != shape[0]:
        t = t.expand(-1, shape[0], -1, -1) if t.shape[1] == 1 else t.mean(1, keepdim=True)
    return F.interpolate(t, size=shape[1:], mode="bilinear", align_corners=False)[0].numpy()


READERS.register("imagefolder")((_is_image_folder, _read_image_folder))


def _existing(source: str) -> Path:
    p = Path(source)
    if not p.exists():
        raise DpconvertError(f"{source}: no such file or directory; check the path")
    return p


def read_raw(source: str) -> RawImages:
    for name in READERS:
        detect, read = READERS.get(name)
        if detect(source):
            return read(source)
    _existing(source)
    raise DpconvertError(
        f"{source}: not a dataset dpconvert can read; give an ImageFolder directory, an .npz with 'x' (and 'y'), "
        "a directory of MNIST-format IDX files (DIR or DIR:train), or builtin:digits"
    )


def fit_to_spec(raw: RawImages, spec, *, require_labels: bool = False) -> Dataset:
    """Convert [0,1] pixels to the classifier's channels, size and normalisation."""
    import torch
    import torch.nn.functional as F

    if require_labels and raw.labels is None:
        raise DpconvertError(f"{raw.description}: labels are required here but the data has none; add labels ('y' in .npz, class folders, or IDX label files)")
    x = torch.from_numpy(np.ascontiguousarray(raw.pixels))
    notes = []
    if x.shape[1] != spec.channels:
        if x.shape[1] == 1:
            x = x.expand(-1, spec.channels, -1, -1).contiguous()
        elif spec.channels == 1:
            x = x.mean(1, keepdim=True)
        else:
            raise DpconvertError(f"{raw.description}: has {x.shape[1]} channels but the model expects {spec.channels}; convert the images")
        notes.append(f"channels {raw.pixels.shape[1]}->{spec.channels}")
    if tuple(x.shape[2:]) != (spec.height, spec.width):
        notes.append(f"resized {tuple(x.shape[2:])}->{(spec.height, spec.width)}")
        x = F.interpolate(x, size=(spec.height, spec.width), mode="bilinear", align_corners=False, antialias=True)
    if notes:
        log.info("%s: %s to match the model input", raw.description, ", ".join(notes))
    mean = torch.tensor(spec.mean).view(1, -1, 1, 1)
    std = torch.tensor(spec.std).view(1, -1, 1, 1)
    x = (x - mean) / std
    y = torch.from_numpy(raw.labels) if raw.labels is not None else None
    if y is not None and len(y) and int(y.max()) >= spec.num_classes:
        raise DpconvertError(f"{raw.description}: labels go up to {int(y.max())} but the model has {spec.num_classes} classes; the data does not match the model")
    return Dataset(x.float(), y, raw.description)


def load_data(source: str, spec, *, require_labels: bool = False) -> Dataset:
    return fit_to_spec(read_raw(source), spec, require_labels=require_labels)
