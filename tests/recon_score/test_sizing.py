"""The reconstruction size rule (seed 004): keep aspect, long side <= max_side (never up), multiples of 16."""

import pytest

from recon_score.errors import InputError
from recon_score.sizing import reconstruction_size


@pytest.mark.parametrize(
    "w, h, expected",
    [
        (256, 256, (256, 256)),  # UCM tiles: unchanged
        (224, 224, (224, 224)),  # RSICD
        (500, 500, (496, 496)),  # Sydney: rounded down, never up
        (600, 400, (592, 400)),
        (4000, 3000, (1024, 768)),  # scaled down, aspect kept
        (3000, 4000, (768, 1024)),
        (1025, 17, (1024, 16)),
        (1000, 1000, (992, 992)),
        (100, 33, (96, 32)),
        (2048, 1536, (1024, 768)),
    ],
)
def test_size_rule(w, h, expected):
    assert reconstruction_size(w, h) == expected


@pytest.mark.parametrize("w, h", [(7, 300), (300, 15), (15, 15), (5000, 40)])
def test_too_small_is_an_error(w, h):
    with pytest.raises(InputError, match="too small"):
        reconstruction_size(w, h)


@pytest.mark.parametrize("w", range(16, 2600, 37))
@pytest.mark.parametrize("h", [16, 33, 250, 511, 777, 1024, 1999])
def test_invariants(w, h):
    try:
        rw, rh = reconstruction_size(w, h)
    except InputError:
        assert max(w, h) / min(w, h) > 1024 / 16 or min(w, h) < 16 * max(1.0, max(w, h) / 1024)
        return
    assert rw % 16 == 0 and rh % 16 == 0
    assert rw <= w and rh <= h  # never up
    assert max(rw, rh) <= 1024
    scale = min(1.0, 1024 / max(w, h))
    assert abs(rw - w * scale) < 16 and abs(rh - h * scale) < 16  # aspect kept up to one grid step


def test_other_grid():
    assert reconstruction_size(300, 200, max_side=128, multiple=8) == (128, 80)
