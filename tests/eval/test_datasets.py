"""Caption dataset loaders on real excerpts, the full shared files, and synthetic layouts."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.datasets import DATASETS, DatasetFormatError, load_dataset
from eval.datasets.karpathy import UCM_CLASSES, label_from_filename
from recon_score.errors import ReconScoreError

DATA = Path(__file__).resolve().parents[1] / "data" / "captions"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "captions"


def _png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((32, 32, 3), 120, np.uint8)).save(path)


def test_sydney_excerpt(tmp_path):
    ann = tmp_path / "dataset_sydney.json"
    shutil.copy(DATA / "dataset_sydney_excerpt.json", ann)
    images = json.loads(ann.read_text())["images"]
    for im in images[:2]:
        _png(tmp_path / "images" / im["filename"])
    ds = load_dataset("sydney-captions", tmp_path, "test")
    assert [s.image for s in ds.samples] == ["219.tif", "220.tif"]
    assert [s.image for s in ds.missing] == ["221.tif"]  # listed but not on disk: reported, not dropped
    assert all(len(s.references) == 5 for s in ds.samples)
    assert ds.samples[0].references[0] == images[0]["sentences"][0]["raw"]
    everything = load_dataset("sydney-captions", tmp_path, "all")
    assert len(everything.samples) == 2 and len(everything.missing) == 3


def test_precomp_excerpt(tmp_path):
    for f in ("test_caps.txt", "test_filename.txt"):
        shutil.copy(DATA / f, tmp_path / f)
    ds = load_dataset("ucm-precomp", tmp_path, "test", check_images=False)
    assert [s.image_id for s in ds.samples] == ["81.tif", "82.tif", "83.tif", "84.tif"]
    assert all(len(s.references) == 5 for s in ds.samples) and ds.samples[0].label == "agricultural"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/captions not present")
def test_full_shared_files_have_the_published_counts():
    syd = load_dataset(
        "sydney-captions", SHARED, "all", annotations=SHARED / "sydney_dataset.json", check_images=False
    )
    assert (len(syd.samples), syd.n_references) == (613, 3065)
    ucm = load_dataset(
        "ucm-precomp", SHARED, "test", annotations=SHARED / "ucm_test_caps.txt", check_images=False
    )
    assert (len(ucm.samples), ucm.n_references) == (210, 1050) and not ucm.notes
    assert {len(s.references) for s in ucm.samples} == {5}
    rsicd = load_dataset(
        "rsicd-precomp", SHARED, "test", annotations=SHARED / "rsicd_test_caps.txt", check_images=False
    )
    assert (len(rsicd.samples), rsicd.n_references) == (1093, 5465)
    rsitmd = load_dataset(
        "rsitmd", SHARED, "test", annotations=SHARED / "rsitmd_test_caps.txt", check_images=False
    )
    assert (len(rsitmd.samples), rsitmd.n_references) == (452, 2260)


def test_ucm_labels():
    assert label_from_filename("ucm-captions", "1.tif") == "agricultural"
    assert label_from_filename("ucm-captions", "2100.tif") == "tenniscourt" == UCM_CLASSES[-1]
    assert label_from_filename("ucm-precomp", "1701.tif") == "runway"
    assert label_from_filename("rsicd", "denseresidential_12.jpg") == "denseresidential"
    assert label_from_filename("rsicd", "00012.jpg") is None


def test_karpathy_synthetic_with_subfolders_and_errors(tmp_path):
    images = [
        {
            "filename": f"{i}.png",
            "split": "test" if i < 3 else "train",
            "filepath": "sub",
            "sentences": [{"raw": f"caption {i}-{k}"} for k in range(5)],
        }
        for i in range(5)
    ]
    (tmp_path / "dataset_ucm.json").write_text(json.dumps({"images": images}))
    for i in range(5):
        _png(tmp_path / "images" / "sub" / f"{i}.png")
    ds = load_dataset("ucm-captions", tmp_path, "test")
    assert [s.image for s in ds.samples] == ["sub/0.png", "sub/1.png", "sub/2.png"] and not ds.missing
    images.append(dict(images[0]))
    (tmp_path / "dataset_ucm.json").write_text(json.dumps({"images": images}))
    with pytest.raises(
        DatasetFormatError, match=r"dataset_ucm.json: images\[5\]: duplicate image filename '0.png'"
    ):
        load_dataset("ucm-captions", tmp_path, "all")
    (tmp_path / "dataset_ucm.json").write_text('{"images": [\n{"filename": }')
    with pytest.raises(DatasetFormatError, match=r"dataset_ucm.json:2: invalid JSON"):
        load_dataset("ucm-captions", tmp_path)
    (tmp_path / "dataset_ucm.json").write_text(
        json.dumps({"images": [{"filename": "a.png", "split": "test"}]})
    )
    with pytest.raises(DatasetFormatError, match=r"images\[0\]: missing 'sentences'"):
        load_dataset("ucm-captions", tmp_path)


def test_nwpu_layout(tmp_path):
    data = {
        "airplane": [
            {
                "filename": "airplane_001.jpg",
                "split": "test",
                "raw": "a plane",
                "raw_1": "b",
                "raw_2": "c",
                "raw_3": "d",
                "raw_4": "e",
                "imgid": 0,
            }
        ],
        "beach": [
            {
                "filename": "beach_001.jpg",
                "split": "train",
                "raw": "sand",
                "raw_1": "x",
                "raw_2": "y",
                "raw_3": "z",
                "raw_4": "w",
                "imgid": 1,
            }
        ],
    }
    (tmp_path / "dataset_nwpu.json").write_text(json.dumps(data))
    _png(tmp_path / "images" / "airplane" / "airplane_001.jpg")
    ds = load_dataset("nwpu-captions", tmp_path, "test")
    assert [(s.image, s.label, s.references) for s in ds.samples] == [
        ("airplane/airplane_001.jpg", "airplane", ["a plane", "b", "c", "d", "e"])
    ]


def test_precomp_malformed(tmp_path):
    (tmp_path / "test_caps.txt").write_text("a\nb\nc\n")
    (tmp_path / "test_filename.txt").write_text("1.tif\n2.tif\n")
    with pytest.raises(DatasetFormatError, match=r"3 lines but test_filename\.txt has 2"):
        load_dataset("rsitmd", tmp_path, check_images=False)
    (tmp_path / "test_filename.txt").write_text("1.tif\n2.tif\n1.tif\n")
    with pytest.raises(DatasetFormatError, match=r"test_filename.txt:3: '1.tif' reappears"):
        load_dataset("rsitmd", tmp_path, check_images=False)
    (tmp_path / "test_caps.txt").write_text("a\n \nc\n")
    (tmp_path / "test_filename.txt").write_text("1.tif\n1.tif\n2.tif\n")
    with pytest.raises(DatasetFormatError, match=r"test_caps.txt:2: empty caption"):
        load_dataset("rsitmd", tmp_path, check_images=False)
    (tmp_path / "test_caps.txt").write_text("a\nb\nc\n")
    ds = load_dataset("rsitmd", tmp_path, check_images=False)
    assert ds.notes and "do not have 5 captions" in ds.notes[0]


def test_generic_jsonl_and_csv(tmp_path):
    _png(tmp_path / "images" / "a.png")
    (tmp_path / "refs.jsonl").write_text(
        json.dumps({"image": "a.png", "references": ["x", "y"], "label": "farm"})
        + "\n"
        + json.dumps({"image": "b.png", "id": "B", "reference_1": "p", "reference_2": "q"})
        + "\n"
    )
    ds = load_dataset("generic", tmp_path, annotations=tmp_path / "refs.jsonl")
    assert [(s.image_id, s.references, s.label) for s in ds.samples] == [("a.png", ["x", "y"], "farm")]
    assert [(s.image_id, s.references) for s in ds.missing] == [("B", ["p", "q"])]
    (tmp_path / "refs.csv").write_text('image,reference_1,reference_2\na.png,"one, two",three\n')
    ds = load_dataset("generic", tmp_path, annotations=tmp_path / "refs.csv")
    assert ds.samples[0].references == ["one, two", "three"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"image": "a.png"}) + "\n{oops\n")
    with pytest.raises(DatasetFormatError, match=r"bad.jsonl:2: invalid JSON"):
        load_dataset("generic", tmp_path, annotations=tmp_path / "bad.jsonl")
    (tmp_path / "esc.jsonl").write_text(json.dumps({"image": "../../etc/passwd"}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"esc.jsonl:1: .*outside the data root"):
        load_dataset("generic", tmp_path, annotations=tmp_path / "esc.jsonl")


def test_unknown_dataset_and_missing_files(tmp_path):
    with pytest.raises(ReconScoreError, match="did you mean 'rsicd'"):
        load_dataset("rsicdd", tmp_path)
    with pytest.raises(ReconScoreError, match=r"dataset_rsicd\.json not found"):
        load_dataset("rsicd", tmp_path)
    assert set(DATASETS) >= {"rsicd", "ucm-captions", "sydney-captions", "nwpu-captions", "rsitmd", "generic"}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"filename": None}, r"dataset_ucm.json: images\[1\].filename must be a non-empty string, got null"),
        ({"filename": ["1.png"]}, r"images\[1\].filename must be a non-empty string, got \[\"1.png\"\]"),
        ({"filepath": 5}, r"images\[1\].filepath must be a non-empty string, got 5"),
        ({"sentences": [{"raw": None}]}, r"images\[1\].sentences\[0\].raw must be a string, got null"),
        ({"sentences": [{"raw": 3}]}, r"images\[1\].sentences\[0\].raw must be a string, got 3"),
        ({"sentences": "a caption"}, r"images\[1\].sentences must be a list"),
        (
            {"filename": "../../x.png"},
            r"images\[1\].filename: image path '../../x.png' is .*outside the data root",
        ),
        ({"filepath": "..", "filename": "x.png"}, r"images\[1\].filename: image path '../x.png' .*outside"),
        ({"filename": "/etc/hostname"}, r"images\[1\].filename: image path '/etc/hostname' .*outside"),
    ],
    ids=[
        "null-filename",
        "list-filename",
        "int-filepath",
        "null-raw",
        "int-raw",
        "str-sentences",
        "dotdot",
        "dotdot-filepath",
        "absolute",
    ],
)
def test_karpathy_bad_fields_are_one_line_naming_the_image(tmp_path, change, words):
    """A null or list filename (a TypeError traceback), a null raw (the reference text "None"), and a path
    leaving the images folder (read outside --root) are one DatasetFormatError naming images[i]."""
    images = [
        {"filename": f"{i}.png", "split": "test", "sentences": [{"raw": f"caption {i}"}]} for i in range(2)
    ]
    images[1].update(change)
    (tmp_path / "dataset_ucm.json").write_text(json.dumps({"images": images}))
    (tmp_path / "x.png").write_bytes(b"outside")  # what ../x.png would read
    with pytest.raises(DatasetFormatError, match=words):
        load_dataset("ucm-captions", tmp_path, "test")


def test_precomp_and_nwpu_paths_stay_in_the_images_folder(tmp_path):
    (tmp_path / "test_caps.txt").write_text("a\n")
    (tmp_path / "test_filename.txt").write_text("../../x.tif\n")
    with pytest.raises(DatasetFormatError, match=r"test_filename.txt:1: image path '../../x.tif' .*outside"):
        load_dataset("ucm-precomp", tmp_path, "test", check_images=False)
    data = {"beach": [{"filename": "../../x.jpg", "split": "test", "raw": "sand"}]}
    (tmp_path / "dataset_nwpu.json").write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError, match=r"beach\[0\].filename: image path 'beach/../../x.jpg'"):
        load_dataset("nwpu-captions", tmp_path, "test")
    data["beach"][0].update(filename="b.jpg", raw_1=None)
    (tmp_path / "dataset_nwpu.json").write_text(json.dumps(data))
    with pytest.raises(DatasetFormatError, match=r"beach\[0\].raw_1 must be a string, got null"):
        load_dataset("nwpu-captions", tmp_path, "test")
