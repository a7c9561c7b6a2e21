"""Flickr8K-Expert / CrowdFlower loaders: the CLIPScore protocol's reference handling, on excerpts of the real
files (tests/data/flickr8k, see its PROVENANCE.md) and, when ../shared is present, on the full files."""

import shutil
from pathlib import Path

import pytest

from eval.preferences import load_preferences
from preference_data import (
    PreferenceFormatError,
    load_flickr8k_crowdflower,
    load_flickr8k_expert,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "flickr8k"
FULL = Path(__file__).resolve().parents[3] / "shared" / "data" / "flickr8k"


def test_expert_skips_own_references_and_flattens_raters():
    df = load_flickr8k_expert(DATA / "ExpertAnnotations.txt")
    # 17 lines; lines 1, 4 and 10 rate each image's own caption #2 against it -> skipped; 14 pairs x 3 experts
    assert len(df) == 14 * 3
    assert not {"1131932671_c8d17751b3.jpg#2", "115684808_cb01227802.jpg#2"} & set(df["candidate_id"])
    first = df[df["image"] == "1131932671_c8d17751b3.jpg"]
    assert list(first["candidate_id"].unique()) == [
        "3245460937_2710a82709.jpg#2",
        "3592968286_b63c81bcd2.jpg#2",
    ]
    assert first["judgment"].tolist() == [3.0, 3.0, 3.0, 1.0, 1.0, 1.0]  # lines 2-3: "3 3 3" and "1 1 1"
    assert first["rater"].tolist() == ["expert1", "expert2", "expert3"] * 2
    assert (df["judgment_kind"] == "rating").all()
    assert all(len(r) == 5 for r in df["references"])  # Expert keeps all five references
    assert first["source"].iloc[0] == "ExpertAnnotations.txt:2"
    assert "skipped 3 candidates" in df.attrs["notes"][0]


def test_crowdflower_removes_every_rated_caption_from_the_references():
    df = load_flickr8k_crowdflower(DATA / "CrowdFlowerAnnotations.txt")
    assert len(df) == 30 and (df["judgment_kind"] == "yes_fraction").all()
    refs = {img: r for img, r in zip(df["image"], df["references"])}
    # 2914206497 and 3567061016 each have one of their own captions rated: 4 references left; 2295750198: 5
    assert len(refs["2914206497_5e36ac6324.jpg"]) == 4
    assert len(refs["3567061016_62768dcce1.jpg"]) == 4
    assert len(refs["2295750198_6d152d7ceb.jpg"]) == 5
    for img, group in df.groupby("image"):
        rated = set(group["candidate"])
        # all rows of an image share the same references, and none of them was rated for that image
        assert all(r == refs[img] for r in group["references"])
        assert not rated & set(refs[img])
    own = df[df["candidate_id"].str.startswith("2914206497_5e36ac6324.jpg#")]
    assert len(own) == 1 and own["judgment"].iloc[0] == pytest.approx(1.0)


def test_loaders_use_the_caption_file_next_to_the_annotations_or_the_given_one(tmp_path):
    shutil.copy(DATA / "ExpertAnnotations.txt", tmp_path / "ExpertAnnotations.txt")
    with pytest.raises(PreferenceFormatError, match=r"Flickr8k\.token\.txt"):
        load_flickr8k_expert(tmp_path / "ExpertAnnotations.txt")
    df = load_preferences(
        tmp_path / "ExpertAnnotations.txt", "flickr8k-expert", references=DATA / "Flickr8k.token.txt"
    )
    assert len(df) == 42


@pytest.mark.parametrize(
    ("file", "line", "bad", "message"),
    [
        (
            "ExpertAnnotations.txt",
            3,
            "1131932671_c8d17751b3.jpg\t3592968286_b63c81bcd2.jpg#2\t1\t1",
            "expected 5",
        ),
        (
            "ExpertAnnotations.txt",
            2,
            "1131932671_c8d17751b3.jpg\t3245460937_2710a82709.jpg#2\t3\tx\t3",
            "numbers",
        ),
        (
            "ExpertAnnotations.txt",
            2,
            "1131932671_c8d17751b3.jpg\t3245460937_2710a82709.jpg#2\t3\t7\t3",
            "1 to 4",
        ),
        ("ExpertAnnotations.txt", 4, "1131932671_c8d17751b3.jpg\tnope.jpg#2\t1\t1\t1", "not in Flickr8k"),
        (
            "CrowdFlowerAnnotations.txt",
            5,
            "2914206497_5e36ac6324.jpg\t249394748_2e4acfbbb5.jpg#2\t0.5\t0\t3",
            "share",
        ),
        *(  # not a count: one line naming file and line, never int()'s error or a row dropped later
            (
                "CrowdFlowerAnnotations.txt",
                5,
                f"2914206497_5e36ac6324.jpg\t249394748_2e4acfbbb5.jpg#2\t{v}",
                "finite",
            )
            for v in ("0\tnan\t3", "0\tinf\t3", "nan\t0\t3", "0\t0\t-inf")
        ),
        ("Flickr8k.token.txt", 7, "no tab here", "Flickr8k.token.txt layout"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, file, line, bad, message):
    for name in ("ExpertAnnotations.txt", "CrowdFlowerAnnotations.txt", "Flickr8k.token.txt"):
        shutil.copy(DATA / name, tmp_path / name)
    lines = (tmp_path / file).read_text().splitlines()
    lines[line - 1] = bad
    (tmp_path / file).write_text("\n".join(lines) + "\n")
    loader = load_flickr8k_crowdflower if file.startswith("Crowd") else load_flickr8k_expert
    target = "CrowdFlowerAnnotations.txt" if file.startswith("Crowd") else "ExpertAnnotations.txt"
    with pytest.raises(PreferenceFormatError, match=message) as err:
        loader(tmp_path / target)
    assert f"{file}:{line}:" in str(err.value)


@pytest.mark.skipif(not FULL.is_dir(), reason="../shared/data/flickr8k not present")
def test_full_files_match_the_published_protocol_counts():
    """Hessel et al.'s download.py reports 16,992 Expert judgments (1,000 images) and 47,830 CrowdFlower ones."""
    ex = load_flickr8k_expert(FULL / "ExpertAnnotations.txt")
    assert len(ex) == 16992 and ex["image"].nunique() == 1000
    assert "skipped 158 candidates" in ex.attrs["notes"][0]
    cf = load_flickr8k_crowdflower(FULL / "CrowdFlowerAnnotations.txt")
    assert len(cf) == 47830 and cf["image"].nunique() == 1000
    assert all(3 <= len(r) <= 5 for r in cf["references"])
