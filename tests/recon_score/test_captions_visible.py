"""Which captions a reader can see: decided by Unicode category and the known blank-drawn code points, the same
rule in `score`, the Python API and the GRPO reward."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
from PIL import Image

from recon_score.errors import InputError
from recon_score.prompts import clean_caption
from recon_score.textfiles import has_visible_text

# (text, visible, why): the categories from the Unicode database, checked below so the table cannot lie
TABLE = [
    ("\u3164", False, "Lo HANGUL FILLER, drawn blank"),
    ("\uffa0", False, "Lo HALFWIDTH HANGUL FILLER, drawn blank"),
    ("\u115f\u1160", False, "Lo HANGUL CHOSEONG / JUNGSEONG FILLER"),
    ("\u2800", False, "So BRAILLE PATTERN BLANK"),
    ("\u0301", False, "Mn COMBINING ACUTE ACCENT without a base"),
    ("\ufe0f", False, "Mn VARIATION SELECTOR-16 alone"),
    ("\u20dd", False, "Me COMBINING ENCLOSING CIRCLE alone"),
    ("\u200b\u200d\u2060\ufeff", False, "Cf zero-width characters"),
    ("\u00a0\u3000\u2028\u2029", False, "Zs / Zl / Zp separators"),
    ("\x00\x1f\x7f", False, "Cc control characters"),
    (" \u3164 \u0301\ufe0f ", False, "a mixture of all of the above"),
    ("e\u0301", True, "a letter with its combining accent"),
    ("\u2764\ufe0f", True, "a heart with its variation selector"),
    ("\u2801", True, "So BRAILLE PATTERN DOTS-1 (one dot)"),
    ("\ud55c", True, "Lo a Hangul syllable"),
    ("\u0915\u093e", True, "Devanagari letter with a spacing vowel sign"),
    ("a farm", True, "plain text"),
    ("\u3164a", True, "a filler next to a letter"),
]
CATEGORY = {"\u3164": "Lo", "\uffa0": "Lo", "\u2800": "So", "\u0301": "Mn", "\ufe0f": "Mn", "\u20dd": "Me"}


def test_the_table_names_the_categories_of_the_unicode_database():
    for ch, cat in CATEGORY.items():
        assert unicodedata.category(ch) == cat, ch


@pytest.mark.parametrize("text, visible, why", TABLE, ids=[row[2] for row in TABLE])
def test_visibility_table(text, visible, why):
    assert has_visible_text(text) is visible, why
    if visible:
        assert clean_caption(text) == text
    else:
        with pytest.raises(InputError, match=r"no visible character|whitespace-only"):
            clean_caption(text)


def test_invisible_captions_are_refused_everywhere(smoke_scorer, tmp_path):
    """The Python API and the GRPO reward give the invisible captions an error (a None reward), the visible one
    a score, in one batch; `score` uses the same check (test_hostile_files)."""
    from recon_score.reward import ReconScoreReward

    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    invisible = ["\u3164", "\uffa0", "\u2800", "\u0301", "\ufe0f"]
    results = smoke_scorer.score(img, [*invisible, "a farm"])
    assert [r.error is not None and "no visible character" in r.error for r in results] == [True] * 5 + [
        False
    ]
    assert results[-1].recon_score is not None
    reward = ReconScoreReward(smoke_scorer, seeds=[1])
    scores = reward(prompts=["p"] * 6, completions=[*invisible, "a farm"], image=[img] * 6)
    assert scores[:5] == [None] * 5 and scores[5] is not None
    assert all("no visible character" in why for why in reward.failures)
