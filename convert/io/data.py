"""Image data readers: ImageFolder dirs, .npz, MNIST-format IDX dirs, builtin:digits.

Every reader yields pixels in [0, 1] at each record's own size; ``load_data``
then fits them to a classifier's ``InputSpec`` (channels, size, mean/std).

Private data is read record by record. A record-level guarantee (add/remove
one private record) holds only if adding, removing or changing one record
changes no other record's input, so no decision here looks at the whole data
set: the pixel scale comes from the stored type (uint8 → /255) or a declared
range (``pixel_range``), never from the data's maximum; each image is resized
and converted to the model's channels on its own; class indices come from the
class folder names, not from which folders exist: folders named 0..K-1 keep
their number, and named folders (cat, dog) need the class list declared
(``class_names``), public by the user's statement, so that a record in a new
folder cannot shift every other record's label. Data outside the declared
domain (a float pixel outside [0, 1], a label beyond the model's classes) is
refused with an error before any mechanism runs: the guarantee is stated for
data sets in that domain.
"""

from __future__ import annotations

import gzip
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from dpconvert.errors import DpconvertError
from dpconvert.registry import Registry

log = logging.getLogger("dpconvert")


@dataclass
class RawImages:
    """Pixels in [0, 1], one array per record, each at its own size.

    ``pixels`` is an (N, C, H, W) array when every record has the same shape, else a list of (C, H, W) arrays.
    Nothing here was decided over the whole data set: ``fit_to_spec`` converts each record on its own.
    """

    pixels: "np.ndarray | list[np.ndarray]"
    labels: Optional[np.ndarray]  # (N,) int64 or None
    description: str

    def __len__(self) -> int:
        return len(self.pixels)


@dataclass
class Dataset:
    x: "object"  # torch.Tensor (N, C, H, W) in the classifier's normalised input space
    y: "object"  # torch.Tensor (N,) int64 or None
    description: str

    def __len__(self) -> int:
        return int(self.x.shape[0])


# A reader claims a source by ``detect(source) -> bool`` and reads it with ``read(source, pixel_range, class_names)``.
READERS: Registry[tuple[Callable[[str], bool], Callable[..., RawImages]]] = Registry("data reader")

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
    if split == "all":
        return RawImages(x, d.target.astype(np.int64), f"builtin:digits, all {len(x)} images (the teacher's training split included)")
    if split == "train":
        return RawImages(xtr, ytr.astype(np.int64), f"builtin:digits train split ({len(ytr)} images)")
    return RawImages(xte, yte.astype(np.int64), f"builtin:digits test split ({len(yte)} images)")


def _is_builtin(source: str) -> bool:
    return source.startswith("builtin:")


def _read_builtin(source: str, pixel_range: Optional[float] = None, class_names=None) -> RawImages:
    name = source[len("builtin:"):]
    splits = {"digits": "test", "digits:test": "test", "digits:train": "train", "digits:all": "all"}
    if name not in splits:
        raise DpconvertError(f"unknown built-in dataset {source!r}", fix="use builtin:digits (test split), builtin:digits:train or builtin:digits:all")
    return digits_split(splits[name])


READERS.register("builtin")((_is_builtin, _read_builtin))


def _is_npz(source: str) -> bool:
    return source.endswith(".npz")


def _read_npz(source: str, pixel_range: Optional[float] = None, class_names=None) -> RawImages:
    path = _existing(source)
    try:
        with np.load(path, allow_pickle=False) as f:
            if "x" not in f:
                raise DpconvertError(fix=f"{source}: an .npz dataset needs an array named 'x' (and optionally 'y'); found {sorted(f.files)}")
            x = np.asarray(f["x"])
            y = np.asarray(f["y"]).astype(np.int64) if "y" in f else None
    except (OSError, ValueError) as e:
        raise DpconvertError(f"{source}: not a readable .npz file ({e})", fix="save it with numpy.savez(path, x=..., y=...)") from None
    x = _scaled(_to_nchw(x, source), source, pixel_range)
    if y is not None and len(y) != len(x):
        raise DpconvertError(fix=f"{source}: 'x' has {len(x)} images but 'y' has {len(y)} labels; they must match")
    return RawImages(x, y, f"{path.name} ({len(x)} images)")


READERS.register("npz")((_is_npz, _read_npz))


def _to_nchw(x: np.ndarray, source: str) -> np.ndarray:
    if x.ndim == 3:  # N,H,W
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):  # N,H,W,C
        x = x.transpose(0, 3, 1, 2)
    elif x.ndim != 4:
        raise DpconvertError(fix=f"{source}: 'x' must be N,H,W or N,C,H,W or N,H,W,C; got shape {x.shape}")
    return x


def _scaled(x: np.ndarray, source: str, pixel_range: Optional[float]) -> np.ndarray:
    """Pixels to [0, 1] by the stored type or the declared range: the same rule for every record.

    uint8 is 0..255 and bool is 0/1; any other type needs ``pixel_range`` unless it is float already in [0, 1].
    A value outside the declared range is refused, never rescaled (rescaling the file because one record is out
    of range would change every other record).
    """
    if pixel_range is not None and not pixel_range > 0:
        raise DpconvertError(fix=f"`pixel_range` must be > 0, got {pixel_range}", param="pixel_range")
    if x.dtype == np.uint8 and pixel_range is None:
        return x.astype(np.float32) / 255.0
    if x.dtype == np.bool_:
        return x.astype(np.float32)
    if pixel_range is None and not np.issubdtype(x.dtype, np.floating):
        raise DpconvertError(f"{source}: pixels stored as {x.dtype}", fix="declare their range with `pixel_range` (e.g. 255 or 65535), "
                             "or store uint8 (0..255) or float in [0, 1]", param="pixel_range")
    scale = 1.0 if pixel_range is None else float(pixel_range)
    y = (x.astype(np.float64) / scale).astype(np.float32)
    if y.size and not (np.isfinite(y).all() and y.min() >= 0.0 and y.max() <= 1.0):
        hint = "declare their range with `pixel_range` (e.g. `pixel_range` 255)" if pixel_range is None else "fix the data or `pixel_range`"
        raise DpconvertError(f"{source}: pixels outside [0, {scale:g}] or not finite (dpconvert never rescales a data set by its own "
                             "maximum: one record would change every other)", fix=hint, param="pixel_range")
    return y


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
        raise DpconvertError(f"{path}: not a valid IDX file ({e})", fix="download the data set again") from None


def _read_idx(source: str, pixel_range: Optional[float] = None, class_names=None) -> RawImages:
    """IDX images are uint8 by format: /255 for every record (``pixel_range`` does not apply)."""
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


def _image_pixels(f: Path) -> np.ndarray:
    """One image file as (C, H, W) in [0, 1], scaled by its own bit depth."""
    from PIL import Image

    try:
        img = Image.open(f)
        img.load()
    except OSError as e:
        raise DpconvertError(f"{f}: cannot read image ({e})", fix="remove or fix the file") from None
    if img.mode in ("I;16", "I;16L", "I;16B"):
        return (np.asarray(img, dtype=np.float32) / 65535.0)[None]
    if img.mode in ("I", "F"):
        raise DpconvertError(f"{f}: {img.mode!r} images (32-bit) have no declared pixel range", fix="save them as 8- or 16-bit PNG")
    img = img.convert("L" if img.mode in ("L", "1", "LA") else "RGB")
    a = np.asarray(img, dtype=np.float32) / 255.0
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def class_index(folder_names: list[str], class_names: Optional[list[str]] = None, source: str = "data") -> dict[str, int]:
    """Folder name → label. With a declared class list, a folder's label is its position in the list; otherwise
    folders must be named 0..K-1 and keep their number. Never sorted from the folders that exist: adding one record
    in a new folder ``ant`` would move cat from 0 to 1 and change every other record."""
    if class_names is not None:
        index = {n: i for i, n in enumerate(class_names)}
        stray = sorted(n for n in folder_names if n not in index)
        if stray:
            raise DpconvertError(f"{source}: the class folder {stray[0]!r} is not in the declared `class_names` ({', '.join(class_names[:5])}"
                                 f"{', …' if len(class_names) > 5 else ''})", fix="add it to the list or move its images", param="class_names")
        return {n: index[n] for n in folder_names}
    if all(n.isdigit() for n in folder_names):
        return {n: int(n) for n in folder_names}
    named = sorted(n for n in folder_names if not n.isdigit())
    raise DpconvertError(f"{source}: the class folders have names ({', '.join(named[:3])}{', …' if len(named) > 3 else ''})",
                         fix="declare the class list in label order with `class_names` (names or a file with one per line; it is public by your "
                         "statement), or name the folders 0..K-1", param="class_names")


def parse_class_names(value: str) -> list[str]:
    """``cat,dog,ant`` or a text file with one class name per line, in label order."""
    p = Path(value)
    names = [n.strip() for n in (p.read_text(encoding="utf-8").splitlines() if p.is_file() else value.split(","))]
    names = [n for n in names if n]
    if len(names) < 2 or len(set(names)) != len(names):
        raise DpconvertError(fix=f"`class_names` must list at least two distinct names in label order, got {value!r}", param="class_names")
    return names


def _read_image_folder(source: str, pixel_range: Optional[float] = None, class_names: Optional[list[str]] = None) -> RawImages:
    root = Path(source)
    index = class_index([c.name for c in root.iterdir() if c.is_dir()], class_names, source)
    images, labels = [], []
    for name in sorted(index, key=lambda n: (index[n], n)):
        for f in sorted((root / name).rglob("*")):
            if f.suffix.lower() in _IMAGE_SUFFIXES:
                images.append(_image_pixels(f))
                labels.append(index[name])
    if not images:
        raise DpconvertError(f"{source}: no images found", fix="give an ImageFolder: one sub-folder per class with image files inside")
    pixels = np.stack(images) if len({i.shape for i in images}) == 1 else images
    return RawImages(pixels, np.asarray(labels, dtype=np.int64), f"{root.name} ImageFolder ({len(images)} images)")


READERS.register("imagefolder")((_is_image_folder, _read_image_folder))


def _existing(source: str) -> Path:
    p = Path(source)
    if not p.exists():
        raise DpconvertError(f"{source}: no such file or directory", fix="check the path")
    return p


def read_raw(source: str, pixel_range: Optional[float] = None, class_names: Optional[list[str]] = None) -> RawImages:
    for name in READERS:
        detect, read = READERS.get(name)
        if detect(source):
            return read(source, pixel_range, class_names)
    _existing(source)
    raise DpconvertError(
        f"{source}: not a dataset dpconvert can read", fix="give an ImageFolder directory, an .npz with 'x' (and 'y'), "
        "a directory of MNIST-format IDX files (DIR or DIR:train), or builtin:digits"
    )


def _fit_records(x, spec):
    """(N, C, H, W) records of one shape → the model's channels and size. Each operation acts on each record alone."""
    import torch.nn.functional as F

    if x.shape[1] != spec.channels:
        if x.shape[1] == 1:
            x = x.expand(-1, spec.channels, -1, -1).contiguous()
        elif spec.channels == 1:
            x = x.mean(1, keepdim=True)
        else:
            raise DpconvertError(f"images with {x.shape[1]} channels cannot feed a model with {spec.channels}", fix="convert the images")
    if tuple(x.shape[2:]) != (spec.height, spec.width):
        x = F.interpolate(x, size=(spec.height, spec.width), mode="bilinear", align_corners=False, antialias=True)
    return x


def fit_to_spec(raw: RawImages, spec, *, require_labels: bool = False) -> Dataset:
    """Convert [0,1] pixels to the classifier's channels, size and normalisation, record by record.

    Records of the same shape are converted together for speed; every operation (channel expansion or mean,
    antialiased bilinear resize, (x − mean)/std with the model's constants) acts on each record independently.
    """
    import torch

    if require_labels and raw.labels is None:
        raise DpconvertError(f"{raw.description}: labels are required here but the data has none", fix="add labels ('y' in .npz, class folders, or IDX label files)")
    records = [raw.pixels] if isinstance(raw.pixels, np.ndarray) else [a[None] for a in raw.pixels]
    shapes = sorted({tuple(r.shape[1:]) for r in records})
    out = torch.empty(len(raw), *spec.shape)
    start = 0
    for r in records:  # (one array for a uniform set, else one per record)
        x = torch.from_numpy(np.ascontiguousarray(r, dtype=np.float32))
        try:
            out[start : start + len(x)] = _fit_records(x, spec)
        except DpconvertError as e:
            raise DpconvertError(f"{raw.description}: {e}") from None
        start += len(x)
    notes = [f"{c}x{h}x{w}" for c, h, w in shapes if (c, h, w) != tuple(spec.shape)]
    if notes:
        log.info("%s: converted each image (%s) to the model input %s", raw.description, ", ".join(notes[:3]) + (" …" if len(notes) > 3 else ""),
                 "x".join(map(str, spec.shape)))
    mean = torch.tensor(spec.mean).view(1, -1, 1, 1)
    std = torch.tensor(spec.std).view(1, -1, 1, 1)
    out = (out - mean) / std
    y = torch.from_numpy(raw.labels) if raw.labels is not None else None
    if y is not None and len(y) and (int(y.max()) >= spec.num_classes or int(y.min()) < 0):
        raise DpconvertError(fix=f"{raw.description}: labels must be 0..{spec.num_classes - 1} for a model with {spec.num_classes} classes; "
                             "the data does not match the model")
    return Dataset(out.float(), y, raw.description)


def load_data(source: str, spec, *, require_labels: bool = False, pixel_range: Optional[float] = None,
              class_names: Optional[list[str]] = None) -> Dataset:
    """Read ``source`` and fit it to ``spec``. ``pixel_range``: the maximum pixel value of stored non-uint8 data (e.g. 255);
    ``class_names``: the class list in label order, for ImageFolders with named class folders."""
    return fit_to_spec(read_raw(source, pixel_range, class_names), spec, require_labels=require_labels)
