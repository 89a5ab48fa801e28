"""Adding a Private-kNN query source touches its own module and nothing else (#49): a data-independent source written
here — random oriented gratings — declares what it is (chosen by name, free of any private data), registers, and is
then chosen with `query_generator`, planned, labelled, carded and audited like the built-in ones by the same
contract check (``tests/test_registry_contracts.py``); nothing in ``convert/`` names it."""

from __future__ import annotations

import math

import pytest

from tests.test_registry_contracts import check_query_source

NAME = "gratings_test"


def _gratings(ctx, opts, teacher, n, rng, on_progress):
    """n sinusoidal gratings of random frequency, orientation and phase in [−1, 1]: no private record involved."""
    import torch

    from dpconvert.methods.query_sources import QuerySource

    c, h, w = teacher.spec.shape
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    freq, angle, phase = (torch.rand(3, n, 1, 1, generator=rng) * torch.tensor([0.8, math.pi, 2 * math.pi]).view(3, 1, 1, 1)).unbind(0)
    x = torch.sin(freq * (xx * torch.cos(angle) + yy * torch.sin(angle)) + phase)
    return QuerySource(x[:, None].expand(n, c, h, w).contiguous(), f"random oriented gratings ({n}; data-independent)",
                       "nothing beyond the above: the queries are data-independent")


@pytest.fixture
def gratings():
    from dpconvert.methods.query_sources import QUERY_SOURCES, QuerySourceKind

    QUERY_SOURCES.register(NAME)(QuerySourceKind(_gratings, free=True))
    try:
        yield NAME
    finally:
        QUERY_SOURCES.remove(NAME)


@pytest.mark.slow
def test_a_query_source_written_outside_the_package_passes_the_contract(gratings, tmp_path):
    card = check_query_source(gratings, tmp_path)
    assert card["mechanism"]["query_source"].startswith("random oriented gratings (200;")


def test_no_query_source_given_lists_the_registered_ones(gratings, tmp_path):
    import dpconvert

    with pytest.raises(dpconvert.DpconvertError, match=f"FILE .* or one of: .*{NAME}"):
        dpconvert.convert("builtin:digits", out=tmp_path / "never.onnx", method="pknn", private_data="builtin:digits:train", eps=8.0)
    assert list(tmp_path.iterdir()) == []
