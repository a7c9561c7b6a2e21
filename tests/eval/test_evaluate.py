"""`reconscore evaluate` on a synthetic UCM-style split: join report, per-image rows, Table 3 summary."""

import json
import shutil

import pandas as pd
import pytest

from eval.cli import main
from tests.smoke_cli import evaluate, smoke


@pytest.fixture(scope="module")
def split(tmp_path_factory, sample_dir):
    root = tmp_path_factory.mktemp("ucm")
    (root / "images").mkdir()
    for i in (1, 2, 3):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
    refs = {
        1: ["There is a piece of farmland .", "It is a piece of cropland ."],
        2: ["There is a piece of farmland with a road .", "A road crosses the farmland ."],
        3: ["Rows of crops in a field .", "A farm field with rows ."],
        4: ["This image is listed but missing .", "Missing image ."],
    }
    images = [
        {"filename": f"{i}.tif", "split": "test", "sentences": [{"raw": r} for r in rs]}
        for i, rs in refs.items()
    ]
    images.append({"filename": "9.tif", "split": "train", "sentences": [{"raw": "train only"}]})
    (root / "dataset_ucm.json").write_text(json.dumps({"images": images, "dataset": "ucm"}))
    return root


def test_evaluate_end_to_end(split, tmp_path):
    caps = tmp_path / "model" / "captions.jsonl"
    caps.parent.mkdir()
    caps.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "image_id": "1.tif",
                    "caption": "There is a piece of farmland .",
                },  # identical to a reference
                {"image": "images/2.tif", "caption": "a road next to a farm"},
                {"image_id": "77", "caption": "matches no image"},
                {"image_id": "1", "caption": "a duplicate for image 1"},
            ]
        )
        + "\n"
    )
    out = tmp_path / "eval"
    rc = main(
        evaluate(
            "ucm-captions",
            split,
            caps,
            "bleu1,bleu4,meteor,rouge,cider,recon_score",
            out,
            "--preset",
            "smoke",
        )
    )
    assert rc == 3  # image 3 has no caption, image 4 is missing on disk
    rows = [json.loads(x) for x in (out / "per_image.jsonl").read_text().splitlines()]
    assert [r["image_id"] for r in rows] == [
        "1.tif",
        "2.tif",
        "3.tif",
        "4.tif",
    ]  # the test split, nothing dropped
    assert rows[0]["bleu1"] == pytest.approx(1.0) and rows[0]["meteor"] == pytest.approx(1.0)
    assert rows[0]["error"] is None and 0 < rows[0]["recon_score"] <= 100
    assert rows[2]["error"] == "no caption for this image in the model output" and rows[2]["bleu1"] is None
    assert "not found" in rows[3]["error"]
    summary = pd.read_csv(out / "summary.csv", index_col=0)
    assert list(summary.columns) == ["BLEU-1", "BLEU-4", "METEOR", "ROUGE", "CIDEr", "ReconScore"]
    assert summary.index[0] == "model"
    assert summary["ReconScore"].iloc[0] == pytest.approx(
        (rows[0]["recon_score"] + rows[1]["recon_score"]) / 2
    )
    assert summary["ROUGE"].iloc[0] == pytest.approx(100 * (rows[0]["rouge"] + rows[1]["rouge"]) / 2)
    run = json.loads((out / "run.json").read_text())
    assert run["join"]["unmatched_captions"] == ["captions.jsonl:3: 77"]
    assert run["join"]["duplicate_captions"] == ["captions.jsonl:4: 1"]
    assert run["dataset"]["missing_images"] == ["4.tif"] and run["failed_images"] == 2
    # BLEU and METEOR are corpus-level as in COCO evaluation (pycocoevalcap on the same PTB tokens), the rest
    # are means
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.meteor.meteor import Meteor

    from eval.metrics.ptb import ptb_tokenize

    texts = [
        "There is a piece of farmland .",
        "a road next to a farm",
        "There is a piece of farmland .",
        "It is a piece of cropland .",
        "There is a piece of farmland with a road .",
        "A road crosses the farmland .",
    ]
    tok = ptb_tokenize(texts)
    corpus, _ = Bleu(4).compute_score({0: tok[2:4], 1: tok[4:6]}, {0: [tok[0]], 1: [tok[1]]}, verbose=0)
    assert summary["BLEU-4"].iloc[0] == pytest.approx(100 * corpus[3])
    assert run["metric_reports"]["bleu4"]["summary"] == "corpus"
    m = Meteor()
    try:
        meteor, _ = m.compute_score({0: tok[2:4], 1: tok[4:6]}, {0: [tok[0]], 1: [tok[1]]})
    finally:
        m.meteor_p.kill()
        m.meteor_p.wait()
        for f in (m.meteor_p.stdin, m.meteor_p.stdout, m.meteor_p.stderr):
            f.close()
    assert summary["METEOR"].iloc[0] == pytest.approx(100 * meteor, abs=1e-9)
    assert run["metric_reports"]["meteor"]["summary"] == "corpus"
    assert run["metric_reports"]["rouge"]["summary"] == "mean over images"


def test_evaluate_text_metrics_only(split, tmp_path):
    caps = tmp_path / "c.csv"
    caps.write_text("image,caption\n1.tif,There is a piece of farmland .\n2.tif,farm\n3.tif,rows of crops\n")
    out = tmp_path / "e"
    assert main(evaluate("ucm-captions", split, caps, "bleu1,rouge", out)) == 3  # 4.tif missing on disk
    assert (out / "summary.md").read_text().startswith("**ucm-captions/test")


def test_select_by_a_registry_metric(split, tmp_path):
    """`describe --select-by meteor` picks by a reference metric using the list's references."""
    lst = tmp_path / "list.jsonl"
    lst.write_text(
        json.dumps({"image": "images/1.tif", "references": ["There is a piece of farmland ."]})
        + "\n"
        + json.dumps({"image": "images/2.tif"})
        + "\n"
    )
    out = tmp_path / "d"
    rc = main(
        smoke(
            "describe", out, "--n", "3", "--inputs", str(lst), "--images", str(split), "--select-by", "bleu1"
        )
    )
    caps = [json.loads(x) for x in (out / "captions.jsonl").read_text().splitlines()]
    cands = [json.loads(x) for x in (out / "candidates.jsonl").read_text().splitlines()]
    assert rc == 3 and caps[1]["caption"] is None and "needs reference" in caps[1]["error"]
    mine = [c for c in cands if c["image_id"] == "images/1"]  # the path under --root, without suffix
    assert all("bleu1" in c for c in mine)
    best = max(range(3), key=lambda k: (mine[k]["bleu1"] if mine[k]["bleu1"] is not None else -1, -k))
    assert (
        caps[0]["index"] == best
        and json.loads((out / "run.json").read_text())["selection"]["metric"] == "bleu1"
    )


def test_no_matching_caption_names_the_unmatched_rows(split, tmp_path, capsys):
    """Nothing matches the split: the one-line error counts the unmatched caption rows and shows the first few
    (it used to say "see the unmatched captions", listed nowhere), with the split's ids to compare."""
    caps = tmp_path / "c.csv"
    caps.write_text("image,caption\nimg_a.tif,a farm\nimg_b.tif,a road\nimg_c.tif,x\nimg_d.tif,y\n")
    assert main(evaluate("ucm-captions", split, caps, "bleu1", tmp_path / "e")) == 1
    err = capsys.readouterr().err
    assert "4 caption row(s) match no split image" in err and "c.csv:2: img_a.tif" in err
    assert "c.csv:4: img_c.tif" in err and "img_d" not in err and "'1.tif'" in err
    assert "Traceback" not in err
