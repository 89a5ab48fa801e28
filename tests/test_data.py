"""Data readers return tensors in the model's normalised input space."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from dpconvert.io.data import load_data, read_raw
from dpconvert.errors import DpconvertError
from dpconvert.io.spec import InputSpec

SPEC = InputSpec(1, 8, 8, 10, (0.5,), (0.25,))


def test_digits_split_is_fixed_and_disjoint():
    a, b = read_raw("builtin:digits:train"), read_raw("builtin:digits")
    assert len(a.pixels) + len(b.pixels) == 1797
    assert np.array_equal(read_raw("builtin:digits").pixels, b.pixels)
    assert 0 <= b.pixels.min() and b.pixels.max() <= 1


def test_npz_layouts_and_normalisation(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, size=(5, 8, 8, 3)).astype(np.uint8)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(5))
    ds = load_data(str(tmp_path / "d.npz"), SPEC)
    assert ds.x.shape == (5, 1, 8, 8)
    expected = (x.astype(np.float32) / 255).mean(-1)
    assert torch.allclose(ds.x[:, 0], (torch.from_numpy(expected) - 0.5) / 0.25, atol=1e-5)
    assert ds.y.tolist() == list(range(5))


def test_idx_reader_gz_and_resize(tmp_path):
    imgs = np.random.default_rng(0).integers(0, 256, size=(3, 28, 28)).astype(np.uint8)
    with gzip.open(tmp_path / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">HBBIII", 0, 8, 3, 3, 28, 28) + imgs.tobytes())
    with open(tmp_path / "t10k-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">HBBI", 0, 8, 1, 3) + bytes([1, 2, 3]))
    ds = load_data(str(tmp_path), SPEC)
    assert ds.x.shape == (3, 1, 8, 8) and ds.y.tolist() == [1, 2, 3]
    ds28 = load_data(str(tmp_path), InputSpec(1, 28, 28, 10))
    assert torch.allclose(ds28.x[:, 0], torch.from_numpy(imgs / 255.0).float(), atol=1e-6)


def test_image_folder(tmp_path):
    from PIL import Image

    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        Image.fromarray(np.full((8, 8), 255 if c == "dog" else 0, np.uint8)).save(tmp_path / c / "a.png")
    with pytest.raises(DpconvertError, match="class_names"):  # named folders: the class list is declared, never sorted from the folders
        load_data(str(tmp_path), InputSpec(1, 8, 8, 2))
    ds = load_data(str(tmp_path), InputSpec(1, 8, 8, 2), class_names=["cat", "dog"])
    assert ds.y.tolist() == [0, 1] and ds.x[1].min() == 1.0


def test_bad_data(tmp_path):
    with pytest.raises(DpconvertError, match="no such file"):
        load_data(str(tmp_path / "nope.npz"), SPEC)
    np.savez(tmp_path / "bad.npz", images=np.zeros((2, 8, 8)))
    with pytest.raises(DpconvertError, match="'x'"):
        load_data(str(tmp_path / "bad.npz"), SPEC)
    np.savez(tmp_path / "nolabels.npz", x=np.zeros((2, 8, 8)))
    with pytest.raises(DpconvertError, match="labels are required"):
        load_data(str(tmp_path / "nolabels.npz"), SPEC, require_labels=True)
