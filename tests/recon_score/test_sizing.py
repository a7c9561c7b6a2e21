"""The reconstruction size rule (the ReconScore paper): keep aspect, long side <= max_side (never up), multiples of 16.

`nearest` (the `paper` rule) is checked against the authors' two functions from hhu-czy/ReconScore
scripts/image_generator.py, re-implemented below from their code; `floor` is the named variant.
"""

import pytest

from recon_score.errors import InputError
from recon_score.sizing import reconstruction_size


def _authors_closest_multiple_of_16(val):
    # get_closest_multiple_of_16 in the authors' scripts/image_generator.py
    return int(round(val / 16) * 16)


def _authors_target_size(raw_w, raw_h, max_side=1024):
    # calculate_target_size in the authors' scripts/image_generator.py
    long_side = max(raw_w, raw_h)
    scale = max_side / long_side if long_side > max_side else 1.0
    return _authors_closest_multiple_of_16(raw_w * scale), _authors_closest_multiple_of_16(raw_h * scale)


# odd shapes: halves (round-half-to-even), scaled long sides, primes, near-1024 and near-multiple sides
ODD_SHAPES = [
    (600, 400), (250, 250), (2048, 1365), (500, 500), (24, 24), (40, 40), (56, 72), (1023, 767),
    (1025, 17 * 16), (1999, 1001), (4000, 3000), (3001, 2999), (777, 333), (511, 257), (263, 1031),
    (1536, 1025), (100, 33), (4096, 1100), (8000, 1212), (1280, 720), (1920, 1080), (2592, 1944),
    (5000, 330), (1100, 1100), (313, 937), (12345, 6789), (1040, 1032), (1048, 1047), (999, 1),
]  # fmt: skip


@pytest.mark.parametrize("w, h", ODD_SHAPES)
def test_nearest_is_the_authors_arithmetic(w, h):
    expected = _authors_target_size(w, h)
    if min(expected) < 16:  # the authors would ask the pipeline for a 0-px side; we refuse the image instead
        with pytest.raises(InputError, match="too small"):
            reconstruction_size(w, h)
        return
    assert reconstruction_size(w, h) == expected
    assert reconstruction_size(w, h, rounding="nearest") == expected


def test_issue_examples():
    assert reconstruction_size(600, 400) == (608, 400)
    assert reconstruction_size(250, 250) == (256, 256)
    assert reconstruction_size(2048, 1365) == (1024, 688)
    assert reconstruction_size(600, 400, rounding="floor") == (592, 400)


def test_nearest_differs_from_floor_where_it_should():
    differs = [s for s in ODD_SHAPES if min(_authors_target_size(*s)) >= 16]
    differs = [s for s in differs if reconstruction_size(*s) != reconstruction_size(*s, rounding="floor")]
    assert len(differs) >= 5  # the variants are not the same rule under two names


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
def test_floor_rule(w, h, expected):
    assert reconstruction_size(w, h, rounding="floor") == expected


@pytest.mark.parametrize("w, h", [(7, 300), (300, 15), (15, 15), (5000, 40)])
def test_too_small_is_an_error(w, h):
    with pytest.raises(InputError, match="too small"):
        reconstruction_size(w, h, rounding="floor")


def test_unknown_rounding_is_refused():
    with pytest.raises(ValueError, match="nearest, floor"):
        reconstruction_size(100, 100, rounding="ceil")


def _invariant_broken(w: int, h: int, rounding: str) -> str | None:
    """What is wrong with reconstruction_size(w, h) under the paper's rule, or None."""
    try:
        rw, rh = reconstruction_size(w, h, rounding=rounding)
    except InputError:
        if max(w, h) / min(w, h) > 1024 / 24 or min(w, h) < 16 * max(1.0, max(w, h) / 1024):
            return None
        return "refused an image that has room for a 16-px side"
    if rw % 16 or rh % 16:
        return f"{rw}x{rh} is not on the 16-px grid"
    if max(rw, rh) > 1024:
        return f"{rw}x{rh} has a side over 1024"
    scale = min(1.0, 1024 / max(w, h))
    if rounding == "floor":
        if rw > w or rh > h:
            return f"{rw}x{rh} rounds up"
        if abs(rw - w * scale) >= 16 or abs(rh - h * scale) >= 16:
            return f"{rw}x{rh} is a grid step or more from the aspect"
    elif abs(rw - w * scale) > 8 or abs(rh - h * scale) > 8:
        return f"{rw}x{rh} is over half a grid step from the aspect"
    return None


def test_invariants_over_the_grid():
    """One property over 686 shapes (49 widths x 7 heights x both roundings): on the 16-px grid, long side at
    most 1024, aspect kept within one grid step (floor: never up) or half a step (nearest); refused only when
    no 16-px side fits."""
    grid = [
        (w, h, r)
        for r in ("nearest", "floor")
        for w in range(16, 2600, 53)
        for h in (16, 33, 250, 511, 777, 1024, 1999)
    ]
    assert len(grid) == 686
    broken = {(w, h, r): why for w, h, r in grid if (why := _invariant_broken(w, h, r))}
    assert not broken, f"{len(broken)} of {len(grid)} shapes break the rule, e.g. {list(broken.items())[:5]}"


def test_other_grid():
    assert reconstruction_size(300, 200, max_side=128, multiple=8, rounding="floor") == (128, 80)
    assert reconstruction_size(300, 200, max_side=128, multiple=8) == (128, 88)  # 85.33 -> 88
