"""ReconScoreCOCO.compute_score(gts, res) in a COCOEvalCap-style loop, next to pycocoevalcap's own Bleu."""

import math
import shutil

import pytest

from recon_score.cocoeval import ReconScoreCOCO
from recon_score.errors import InputError, ReconScoreWarning

pytest.importorskip("pycocoevalcap.bleu.bleu")
from pycocoevalcap.bleu.bleu import Bleu

GTS = {
    "UCM_2": ["there is a piece of farmland", "farmland with a road"],
    "UCM_1": ["two planes are parked near the terminal"],
}
RES = {"UCM_2": ["a piece of farmland"], "UCM_1": ["planes near a terminal"]}


@pytest.fixture
def folder(tmp_path, sample_dir):
    for name in ("UCM_1", "UCM_2"):
        shutil.copy(sample_dir / "images" / f"{name}.tif", tmp_path / f"{name}.tif")
    return tmp_path


def test_same_contract_as_pycocoevalcap_bleu(folder, smoke_scorer):
    bleu_score, bleu_items = Bleu(4).compute_score(GTS, RES, verbose=0)
    recon = ReconScoreCOCO(folder, pattern="{id}.tif", scorer=smoke_scorer)
    score, items = recon.compute_score(GTS, RES)
    # Bleu: ([corpus per n], [[per item in gts order] per n]); ours: one metric, so (corpus, [per item])
    assert type(score) is type(bleu_score[3]) is float
    assert type(items) is type(bleu_items[3]) is list and len(items) == len(bleu_items[3]) == len(GTS)
    assert all(type(v) is float for v in items)
    # per-item order is gts key order, like Bleu's: check it against a direct ReconScorer call per id
    direct = [smoke_scorer.score(folder / f"{k}.tif", RES[k][0]).recon_score for k in GTS]
    assert items == pytest.approx(direct, abs=1e-9)
    assert score == pytest.approx(sum(direct) / 2, abs=1e-9)
    assert recon.method() == "ReconScore"


def test_a_cocoevalcap_loop_with_a_mapping(folder, smoke_scorer):
    scorers = [
        (Bleu(4), ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"]),
        (ReconScoreCOCO({k: folder / f"{k}.tif" for k in GTS}, scorer=smoke_scorer), "ReconScore"),
    ]
    evals, img_evals = {}, {k: {} for k in GTS}
    for scorer, method in scorers:  # pycocoevalcap's COCOEvalCap.evaluate body
        score, scores = scorer.compute_score(GTS, RES)
        if isinstance(method, list):
            for sc, scs, m in zip(score, scores, method):
                evals[m] = sc
                for k, s in zip(GTS, scs):
                    img_evals[k][m] = s
        else:
            evals[method] = score
            for k, s in zip(GTS, scores):
                img_evals[k][method] = s
    assert set(evals) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ReconScore"}
    # the COCO contract: the corpus score is the mean of the per-image ones, each image's own
    per_image = [img_evals[k]["ReconScore"] for k in GTS]
    assert evals["ReconScore"] == pytest.approx(sum(per_image) / len(per_image), abs=1e-9)
    assert len(set(per_image)) == len(per_image)  # two images, two captions: not one value copied


def test_bad_items_are_nan_and_named(folder, smoke_scorer):
    gts = {**GTS, "gone": ["x"], "two": ["y"]}
    res = {**RES, "gone": ["a caption"], "two": ["a", "b"]}
    recon = ReconScoreCOCO(folder, pattern="{id}.tif", scorer=smoke_scorer)
    with pytest.warns(ReconScoreWarning, match="2 of 4 ids not scored"):
        score, items = recon.compute_score(gts, res)
    assert not math.isnan(score) and math.isnan(items[2]) and math.isnan(items[3])
    assert "gone.tif" in recon.errors["gone"] and "not found" in recon.errors["gone"]
    assert "one caption" in recon.errors["two"]
    with pytest.raises(ValueError, match="same ids; only in gts: \\['gone'\\]"):
        recon.compute_score({**GTS, "gone": ["x"]}, RES)
    escape = ReconScoreCOCO(folder, pattern="../{id}.tif", scorer=smoke_scorer)
    with pytest.raises(InputError, match=r"no id has an image .*outside the data root"):
        escape.compute_score(GTS, RES)
    with pytest.raises(InputError, match="not found"):
        ReconScoreCOCO(folder / "nope", scorer=smoke_scorer)


def test_default_pattern_finds_any_supported_extension(folder, smoke_scorer):
    """The sample is .tif: the default pattern finds it (it used to look for .jpg and give all-NaN)."""
    (folder / "UCM_1.tif").rename(folder / "UCM_1.PNG.tmp")
    from PIL import Image

    Image.open(folder / "UCM_1.PNG.tmp").save(folder / "UCM_1.png")  # a second format, same pixels
    (folder / "UCM_1.PNG.tmp").unlink()
    score, items = ReconScoreCOCO(folder, scorer=smoke_scorer).compute_score(GTS, RES)
    direct = [
        smoke_scorer.score(folder / n, RES[k][0]).recon_score
        for k, n in (("UCM_2", "UCM_2.tif"), ("UCM_1", "UCM_1.png"))
    ]
    assert items == pytest.approx(direct, abs=1e-9) and not math.isnan(score)


def test_a_folder_without_the_images_is_an_error(folder, smoke_scorer):
    with pytest.raises(InputError, match=r"no id has an image in .*no image UCM_\d\.\* in"):
        ReconScoreCOCO(folder, scorer=smoke_scorer).compute_score(
            {"UCM_8": ["x"], "UCM_9": ["y"]}, {"UCM_8": ["a"], "UCM_9": ["b"]}
        )
    with pytest.raises(InputError, match=r"no id has an image .*not found"):
        ReconScoreCOCO(folder, pattern="{id}.jpg", scorer=smoke_scorer).compute_score(GTS, RES)
    shutil.copy(folder / "UCM_1.tif", folder / "UCM_1.jpg")
    with pytest.warns(ReconScoreWarning, match="1 of 2 ids"):
        ReconScoreCOCO(folder, scorer=smoke_scorer).compute_score(GTS, RES)
