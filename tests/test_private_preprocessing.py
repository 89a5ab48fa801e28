"""Private data is preprocessed record by record: one record never changes another record's tensor.

The record-level guarantees (Private-kNN; later DP-SGD) assume that adding, removing or changing one private
record changes only that record's input. Dataset-wide decisions break this: dividing a whole .npz by 255 because
one value is above 1, or resizing every image of an ImageFolder to the largest shape found in it. These tests
add, remove or change one record in every reader's format and compare every other record's tensor.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpconvert.io.data import load_data
from dpconvert.errors import DpconvertError
from dpconvert.io.spec import InputSpec

SPEC = InputSpec(1, 8, 8, 3, (0.5,), (0.25,))
RGB_SPEC = InputSpec(3, 8, 8, 3, (0.5, 0.4, 0.3), (0.25, 0.2, 0.3))


def _load_or_domain_error(source: str, spec: InputSpec):
    """The tensor, or None when the reader refuses the data (a declared-domain error: then nothing is released)."""
    try:
        return load_data(source, spec, require_labels=True)
    except DpconvertError:
        return None


def _same_other_records(base, grown, positions) -> None:
    """``grown`` holds every record of ``base`` at ``positions``; their tensors must be identical."""
    assert grown is not None
    assert torch.equal(grown.x[positions], base.x), "adding one record changed the tensor of another record"
    assert torch.equal(grown.y[positions], base.y)


def _write_npz(path, x, y) -> str:
    np.savez(path, x=x, y=y)
    return str(path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), extra_value=st.sampled_from([0.0, 0.5, 1.0, 1.5, 7.0, 255.0, -0.2]), float_data=st.booleans())
def test_npz_one_record_never_changes_another(tmp_path, seed, extra_value, float_data):
    rng = np.random.default_rng(seed)
    n = 6
    if float_data:
        x = rng.random((n, 8, 8), dtype=np.float32)
    else:
        x = rng.integers(0, 256, (n, 8, 8)).astype(np.uint8)
    y = rng.integers(0, 3, n)
    base = _load_or_domain_error(_write_npz(tmp_path / f"a{seed}.npz", x, y), SPEC)
    assert base is not None  # well-formed data loads
    extra = np.full((1, 8, 8), extra_value, dtype=x.dtype if float_data else np.float32)
    if not float_data:
        extra = np.clip(extra, 0, 255).astype(np.uint8)
    grown = _load_or_domain_error(_write_npz(tmp_path / f"b{seed}.npz", np.concatenate([x, extra]), np.append(y, 0)), SPEC)
    if float_data and not 0.0 <= extra_value <= 1.0:
        assert grown is None  # outside the declared [0, 1] domain: refused, never rescaled
        return
    _same_other_records(base, grown, torch.arange(n))
    # removing a record, too
    shrunk = _load_or_domain_error(_write_npz(tmp_path / f"c{seed}.npz", x[1:], y[1:]), SPEC)
    assert torch.equal(shrunk.x, base.x[1:])


def test_npz_float_outside_unit_range_is_refused_not_rescaled(tmp_path):
    """The finding: one pixel of 1.5 used to divide the whole file by 255."""
    x = np.random.default_rng(0).random((5, 8, 8)).astype(np.float32)
    x[-1, 0, 0] = 1.5
    with pytest.raises(DpconvertError, match="`pixel_range`"):
        load_data(_write_npz(tmp_path / "d.npz", x, np.zeros(5, int)), SPEC)


def test_npz_declared_pixel_range(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (4, 8, 8)).astype(np.float32)
    ds = load_data(_write_npz(tmp_path / "d.npz", x, np.zeros(4, int)), InputSpec(1, 8, 8, 3), pixel_range=255)
    assert torch.allclose(ds.x[:, 0], torch.from_numpy(x / 255.0).float(), atol=1e-6)
    with pytest.raises(DpconvertError, match="`pixel_range`"):
        load_data(_write_npz(tmp_path / "i.npz", x.astype(np.int64), np.zeros(4, int)), SPEC)


def _write_idx(directory, imgs: np.ndarray, labels: np.ndarray) -> str:
    directory.mkdir(exist_ok=True)
    n, h, w = imgs.shape
    (directory / "train-images-idx3-ubyte").write_bytes(struct.pack(">HBBIII", 0, 8, 3, n, h, w) + imgs.astype(np.uint8).tobytes())
    (directory / "train-labels-idx1-ubyte").write_bytes(struct.pack(">HBBI", 0, 8, 1, n) + labels.astype(np.uint8).tobytes())
    return f"{directory}:train"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), size=st.sampled_from([8, 12, 28]))
def test_idx_one_record_never_changes_another(tmp_path, seed, size):
    rng = np.random.default_rng(seed)
    imgs, labels = rng.integers(0, 256, (5, size, size)), rng.integers(0, 3, 5)
    base = load_data(_write_idx(tmp_path / f"a{seed}_{size}", imgs, labels), SPEC, require_labels=True)
    extra = np.full((1, size, size), 255)
    grown = load_data(_write_idx(tmp_path / f"b{seed}_{size}", np.concatenate([imgs, extra]), np.append(labels, 2)), SPEC, require_labels=True)
    _same_other_records(base, grown, torch.arange(5))


def _write_folder(root, images: dict) -> str:
    """images: {(class, file name): uint8 array (H, W) or (H, W, 3)}."""
    from PIL import Image

    for (cls, name), a in images.items():
        (root / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(a).save(root / cls / name)
    return str(root)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), extra_h=st.integers(4, 20), extra_w=st.integers(4, 20), extra_rgb=st.booleans(),
       rgb_spec=st.booleans())
def test_image_folder_one_record_never_changes_another(tmp_path, seed, extra_h, extra_w, extra_rgb, rgb_spec):
    """The finding: one added 12×12 image used to resize every other image of the folder."""
    rng = np.random.default_rng(seed)
    spec = RGB_SPEC if rgb_spec else SPEC
    images = {}
    for i in range(6):
        h, w = (10, 10) if i % 2 else (8, 9)
        images[(str(i % 3), f"img{i}.png")] = rng.integers(0, 256, (h, w)).astype(np.uint8)
    base = load_data(_write_folder(tmp_path / f"a{seed}", images), spec, require_labels=True)
    extra_shape = (extra_h, extra_w, 3) if extra_rgb else (extra_h, extra_w)
    grown_images = {**images, ("2", "zzz_extra.png"): rng.integers(0, 256, extra_shape).astype(np.uint8)}
    grown = load_data(_write_folder(tmp_path / f"b{seed}", grown_images), spec, require_labels=True)
    # files are read in (class, name) order; the extra one sorts last in class 2, i.e. last overall
    _same_other_records(base, grown, torch.arange(len(images)))


def test_image_folder_integer_class_folders_map_to_their_number(tmp_path):
    """Class indices come from the folder names ("0".."K-1"), not from which folders happen to hold records."""
    only_class_2 = {("2", "a.png"): np.zeros((8, 8), np.uint8)}
    ds = load_data(_write_folder(tmp_path / "f", only_class_2), SPEC, require_labels=True)
    assert ds.y.tolist() == [2]
