"""The features-level bundle and `reconscore retrieve-eval`: hand-computable mAPs, clear errors."""

import json
import math

import numpy as np
import pytest
import torch

from eval.cli import main
from retrieval.bundle import load_bundle, save_bundle
from retrieval.data import EvalData
from retrieval.errors import BundleError

COSINES = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]  # image similarity of database item i to every query image


def arrays() -> dict[str, np.ndarray]:
    """Database item i = cos_i e0 + sin_i e1, query images = e0, query texts = e2 (text similarity 0 to all).
    Image ranking: items 0, 1, ..., 5. Positives: q0 {1, 3}, q1 {0}, q2 {5}; groups a, a, b."""
    db = np.zeros((6, 4), np.float32)
    for i, c in enumerate(COSINES):
        db[i, 0], db[i, 1] = c, math.sqrt(1 - c * c)
    q_img = np.tile(np.array([[1, 0, 0, 0]], np.float32), (3, 1))
    q_txt = np.tile(np.array([[0, 0, 1, 0]], np.float32), (3, 1))
    return {
        "query_image": q_img,
        "query_text": q_txt,
        "database": db,
        "positives": np.array([[0, 1], [0, 3], [1, 0], [2, 5]], np.int64),
        "query_group": np.array(["a", "a", "b"]),
    }


def write(path, **changes):
    data = arrays()
    data.update(changes)
    for k in [k for k, v in data.items() if v is None]:
        del data[k]
    np.savez(path, **data)
    return path


def run_json(capsys, *argv) -> dict:
    assert main(["retrieve-eval", *argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_retrieve_eval_reproduces_hand_computed_maps(tmp_path, capsys):
    """Non-interpolated AP: q0 ranks 2 and 4 -> (1/2 + 2/4)/2 = 0.5; q1 rank 1 -> 1; q2 rank 6 -> 1/6.
    Overall (0.5 + 1 + 1/6)/3; macro ((0.5 + 1)/2 + 1/6)/2. Recall@1: 1/3, @5: 2/3, @10: 1."""
    bundle = write(tmp_path / "b.npz")
    out = run_json(capsys, "--bundle", str(bundle), "--method", "image")
    assert set(out) == {
        "method",
        "ap",
        "averaging",
        "config",
        "tie_range",
        "map_overall",
        "map_macro",
        "min_map_macro",
        "per_group",
        "recall@1",
        "recall@5",
        "recall@10",
    }
    assert out["method"] == "image" and out["ap"] == "non-interpolated" and out["tie_range"] is None
    assert out["min_map_macro"] == pytest.approx((0.5 + 1 / 6) / 2)  # i-CIR's minmAP: mean of group minima
    assert out["map_overall"] == pytest.approx((0.5 + 1 + 1 / 6) / 3)
    assert out["map_macro"] == pytest.approx(((0.5 + 1) / 2 + 1 / 6) / 2)
    assert out["per_group"] == pytest.approx({"a": 0.75, "b": 1 / 6})
    assert (out["recall@1"], out["recall@5"], out["recall@10"]) == pytest.approx((1 / 3, 2 / 3, 1.0))


def test_trapezoidal_and_weicom_extremes(tmp_path, capsys):
    """Trapezoidal: q0 ((0 + 1/2)/2 + (1/3 + 2/4)/2)/2 = 1/3, q1 1, q2 (0 + 1/6)/2 = 1/12."""
    bundle = str(write(tmp_path / "b.npz"))
    out = run_json(capsys, "--bundle", bundle, "--method", "image", "--ap", "trapezoidal")
    assert out["map_overall"] == pytest.approx((1 / 3 + 1 + 1 / 12) / 3)
    image = run_json(capsys, "--bundle", bundle, "--method", "image")
    weicom0 = run_json(capsys, "--bundle", bundle, "--method", "weicom", "--lambda", "0")
    assert weicom0["map_overall"] == pytest.approx(image["map_overall"])


def test_recall_fraction_and_empty_queries(tmp_path, capsys):
    bundle = str(write(tmp_path / "b.npz", positives=np.array([[0, 1], [0, 3], [1, 0]], np.int64)))
    out = run_json(
        capsys, "--bundle", bundle, "--method", "image", "--recall", "fraction", "--empty-positives", "skip"
    )
    assert out["map_overall"] == pytest.approx((0.5 + 1) / 2) and out["per_group"] == {"a": 0.75, "b": None}
    assert out["recall@1"] == pytest.approx((0 + 1) / 2) and out["recall@5"] == pytest.approx(1.0)
    assert main(["retrieve-eval", "--bundle", bundle, "--method", "image", "--empty-positives", "error"]) == 1
    assert "have no positive" in capsys.readouterr().err


def test_database_groups_restrict_the_ranking(tmp_path, capsys):
    """Items 0-2 belong to instance x, 3-5 to y; q0 (x) has positive 1 -> rank 2 in {0,1,2}: AP 1/2."""
    bundle = write(
        tmp_path / "g.npz",
        positives=np.array([[0, 1], [1, 4], [2, 5]], np.int64),
        database_group=np.array(["x", "x", "x", "y", "y", "y"]),
        query_db_group=np.array(["x", "y", "y"]),
        query_group=np.array(["x", "y", "y"]),
    )
    out = run_json(capsys, "--bundle", str(bundle), "--method", "image")
    assert out["per_group"] == pytest.approx({"x": 0.5, "y": (1 / 2 + 1 / 3) / 2})


def test_subset_recall_from_a_bundle(tmp_path, capsys):
    """q1's positive 0 ranks 1st, q2's positive 5 ranks 6th in the gallery but 2nd in its subset {2, 5};
    q0's subset {3, 4} holds positive 3 at rank 1. Bundles without `subset` report no recall_subset."""
    subset = np.array([[0, 3], [0, 4], [1, 0], [1, 1], [2, 2], [2, 5]], np.int64)
    out = run_json(capsys, "--bundle", str(write(tmp_path / "s.npz", subset=subset)), "--method", "image")
    assert out["recall@1"] == pytest.approx(1 / 3)
    assert out["recall_subset@1"] == pytest.approx(2 / 3) and out["recall_subset@2"] == pytest.approx(1.0)
    plain = run_json(capsys, "--bundle", str(write(tmp_path / "p.npz")), "--method", "image")
    assert not any(k.startswith("recall_subset") for k in plain)


def test_basic_runs_on_a_bundle_with_corpora(tmp_path, capsys):
    g = np.random.default_rng(0)
    corpus = g.normal(size=(20, 4)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    bundle = write(tmp_path / "b.npz", corpus_pos=corpus, corpus_neg=corpus[:10])
    assert (
        main(
            ["retrieve-eval", "--bundle", str(bundle), "--method", "basic", "--set", "basic.qe_k=2", "--json"]
        )
        == 0
    )
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert 0.0 <= out["map_overall"] <= 1.0 and "contextualisation needs the text encoder" in captured.err


@pytest.mark.parametrize("method", ["freedom", "cirevl", "magiclens"])
def test_methods_needing_more_than_features_say_so(method, tmp_path, capsys):
    bundle = str(write(tmp_path / "b.npz"))
    assert main(["retrieve-eval", "--bundle", bundle, "--method", method]) == 1
    err = capsys.readouterr().err
    assert f"method {method!r} cannot run" in err


def test_cli_argument_errors(tmp_path, capsys):
    bundle = str(write(tmp_path / "b.npz"))
    assert main(["retrieve-eval", "--bundle", bundle, "--method", "image", "--lambda", "0.3"]) == 2
    assert "--lambda is WeiCom's weight" in capsys.readouterr().err
    assert main(["retrieve-eval", "--bundle", bundle, "--method", "basic", "--set", "basic.nope=1"]) == 1
    assert "no hyperparameter 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"database": None}, "'database' is missing"),
        ({"query_text": arrays()["query_text"].astype(np.float64)}, "must be float32"),
        ({"database": arrays()["database"] * 2}, "'database' rows must be L2-normalised"),
        ({"positives": np.array([[0, 9]])}, r"positives\[:, 1\] must be database indices"),
        ({"query_group": np.array(["a", "b"])}, "query_group must have 3 entries"),
        ({"querry_text": arrays()["query_text"]}, "'querry_text' is not a bundle key"),
        ({"query_group": np.array([1, 2, 3])}, "must be a string array"),
        ({"database_group": np.array(["x"] * 6)}, "database_group and query_db_group go together"),
    ],
)
def test_bundle_errors_name_the_key_and_the_fix(tmp_path, changes, message):
    with pytest.raises(Exception, match=message):
        load_bundle(write(tmp_path / "bad.npz", **changes))


def test_object_arrays_are_refused(tmp_path):
    path = write(tmp_path / "obj.npz", query_group=np.array(["a", "a", "b"], dtype=object))
    with pytest.raises(Exception, match="pickle"):
        load_bundle(path)


def test_save_load_round_trip(tmp_path):
    a = {k: torch.from_numpy(v) for k, v in arrays().items() if v.dtype != np.dtype("<U1")}
    data = EvalData(
        a["query_image"],
        a["query_text"],
        a["database"],
        a["positives"],
        ["a", "a", "b"],
        query_subgroup=["s", "t", "s"],
    )
    b = load_bundle(save_bundle(tmp_path / "rt.npz", data))
    assert np.array_equal(b.data.database, data.database.numpy()) and b.data.query_subgroup == ["s", "t", "s"]
    with pytest.raises(BundleError):
        np.savez(tmp_path / "x.npz", **{**arrays(), "exclude": np.zeros((1, 3), np.int64)})
        load_bundle(tmp_path / "x.npz")


def test_basic_hint_names_what_retrieve_eval_has(tmp_path, capsys):
    """On a bundle, BASIC's missing corpora are named as bundle keys and every option the hint names exists."""
    import re

    from eval.cli.retrieve_eval import command

    bundle = str(write(tmp_path / "b.npz"))
    assert main(["retrieve-eval", "--bundle", bundle, "--method", "basic"]) == 1
    err = capsys.readouterr().err
    assert "corpus_pos, corpus_neg in the bundle" in err
    options = {o for p in command.params for o in p.opts}
    named = set(re.findall(r"(--[a-z][a-z-]+)", err))
    assert named and named <= options, named - options


def test_tied_scores_give_the_pessimistic_optimistic_range(tmp_path, capsys):
    """`text` scores every item 0 (query texts are orthogonal to the database): all items tie. Hand-computed
    non-interpolated AP: q0 (positives {1, 3} of 6) pessimistic ranks 5, 6 -> (1/5 + 2/6)/2 = 4/15, optimistic
    ranks 1, 2 -> 1; q1 and q2 (one positive) 1/6 and 1. Index order: q0 ranks 2, 4 -> 1/2; q1 rank 1 -> 1;
    q2 rank 6 -> 1/6."""
    bundle = str(write(tmp_path / "b.npz"))
    out = run_json(capsys, "--bundle", bundle, "--method", "text")
    rng = out["tie_range"]
    assert rng["tied_positives"] == 4 and rng["queries"] == 3 and rng["rule"] == "index"
    assert rng["overall"] == pytest.approx([(4 / 15 + 1 / 6 + 1 / 6) / 3, 1.0])
    assert rng["macro"] == pytest.approx([((4 / 15 + 1 / 6) / 2 + 1 / 6) / 2, 1.0])
    assert out["map_overall"] == pytest.approx((0.5 + 1 + 1 / 6) / 3)  # inside the range, by index order
    assert main(["retrieve-eval", "--bundle", bundle, "--method", "text"]) == 0
    err = capsys.readouterr().err
    assert (
        "4 positives of 3 queries share their score with a negative" in err
        and "pessimistic-optimistic" in err
    )


def test_a_bundle_protocol_sets_the_ap_variant_and_the_method_defaults(tmp_path, capsys):
    """A protocol stored with the bundle (i-CIR's: trapezoidal-eps AP, rectified product) is applied; an
    explicit --ap or --set still wins."""
    record = {
        "benchmark": "icir",
        "ap": "trapezoidal-eps",
        "method_defaults": {"product": {"rectify": "true"}},
    }
    bundle = str(write(tmp_path / "b.npz", protocol=np.array(json.dumps(record), dtype=str)))
    out = run_json(capsys, "--bundle", bundle, "--method", "product")
    assert out["ap"] == "trapezoidal-eps" and out["config"] == {"rectify": True}
    out = run_json(
        capsys, "--bundle", bundle, "--method", "product", "--ap", "trapezoidal", "--set", "rectify=false"
    )
    assert out["ap"] == "trapezoidal" and out["config"] == {"rectify": False}
    bad = write(tmp_path / "bad.npz", protocol=np.array(json.dumps({"ap": "eleven-point"}), dtype=str))
    with pytest.raises(BundleError, match="'protocol' needs an 'ap'"):
        load_bundle(bad)


def test_repeated_query_ids_are_refused_naming_the_rows(tmp_path):
    bundle = write(tmp_path / "b.npz", query_id=np.array(["q0", "q1", "q0"]))
    with pytest.raises(Exception, match=r"1 repeated query_id\(s\): 'q0' at row 0 and row 2"):
        load_bundle(bundle)


def _zip_with(path, name: str, write_member) -> str:
    """The test bundle with member `name` written by `write_member(fh)` (other members as np.savez writes them)."""
    import io
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, value in arrays().items():
            if f"{key}.npy" != name:
                buf = io.BytesIO()
                np.save(buf, value)
                zf.writestr(f"{key}.npy", buf.getvalue())
        with zf.open(name, "w", force_zip64=True) as fh:
            write_member(fh)
    return str(path)


def test_a_header_declaring_a_trillion_floats_is_refused_before_reading(tmp_path, capsys):
    def forged(fh):
        np.lib.format.write_array_header_2_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
        fh.write(np.zeros(16, np.float32).tobytes())

    path = _zip_with(tmp_path / "huge.npz", "database.npy", forged)
    with pytest.raises(
        BundleError,
        match=r"'database' declares shape \(1000000000000,\) of float32 \(4000000000000 bytes\) but the archive holds 64",
    ):
        load_bundle(path)
    assert main(["retrieve-eval", "--bundle", path, "--method", "image"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "huge.npz: 'database' declares shape" in err


def test_a_deflate_bomb_is_refused_before_inflating(tmp_path):
    """320 MiB of zeros deflate to ~0.3 MiB (the report's case: 1.9 MB inflating to 2.5 GB)."""
    n = 80 << 20  # float32 values

    def bomb(fh):
        np.lib.format.write_array_header_2_0(
            fh, {"descr": "<f4", "fortran_order": False, "shape": (n // 4, 4)}
        )
        zeros = bytes(16 << 20)
        for _ in range(n * 4 // len(zeros)):
            fh.write(zeros)

    path = _zip_with(tmp_path / "bomb.npz", "database.npy", bomb)
    with pytest.raises(
        BundleError, match=r"'database' inflates from \d+ to \d+ bytes \(\d+x\).*decompression bomb"
    ):
        load_bundle(path)


BASIC_WITHOUT_CORPORA = [f"--set={k}=false" for k in ("projection", "centering", "min_normalization")]
NUMPY_ONLY_RUN = """
import json, sys
from eval.cli import main
main(["retrieve-eval", "--json", *sys.argv[1:]])
heavy = sorted(m for m in ("torch", "pandas", "transformers", "open_clip", "PIL.Image") if m in sys.modules)
print(json.dumps(heavy))
"""


@pytest.mark.parametrize(
    "method",
    [
        ["--method", "image"],
        ["--method", "sum"],
        ["--method", "product", "--set", "rectify=true"],
        ["--method", "weicom", "--lambda", "0.3"],
        ["--method", "basic", "--set", "qe_k=2", *BASIC_WITHOUT_CORPORA],
    ],
)
def test_retrieve_eval_on_a_bundle_loads_no_torch(tmp_path, capsys, method):
    """A bundle's methods score, rank and average on numpy alone (Python + torch start-up is most of a
    PatternCom-sized evaluation): the same figures as in this process, where torch is loaded, and no torch,
    pandas, transformers, open_clip or PIL.Image in the child. The bundle uses every path of the evaluation:
    per-group databases, an excluded pair, subsets."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    bundle = write(
        tmp_path / "b.npz",
        database_group=np.array(["x", "x", "x", "x", "y", "y"]),
        query_db_group=np.array(["x", "x", "y"]),
        exclude=np.array([[0, 0]], np.int64),
        subset=np.array([[0, 1], [0, 2], [1, 0], [1, 1], [2, 4], [2, 5]], np.int64),
    )
    argv = ["--bundle", str(bundle), *method]
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run(
        [sys.executable, "-c", NUMPY_ONLY_RUN, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=repo,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    report, heavy = child.stdout.strip().splitlines()[-2:]
    assert json.loads(heavy) == []
    assert json.loads(report) == run_json(capsys, *argv)


@pytest.mark.parametrize("method", ["sum", "product"])
def test_copies_of_one_database_item_score_exactly_alike_on_a_bundle(method):
    """A bundle's scores are float32 numpy dot products over the distinct database rows: a copy of a database
    item ties with it exactly wherever it sits (a float32 BLAS product of every row can give copies different
    last bits, which the tie rules would read as a ranking)."""
    from retrieval.methods import build_method
    from retrieval.methods.base import MethodContext

    rng = np.random.default_rng(0)
    unit = lambda n: (lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))(  # noqa: E731
        rng.normal(size=(n, 256))
    )
    db, q_img, q_txt = unit(3000), unit(300), unit(300)
    src, dst = rng.permutation(1500)[:700], 1500 + rng.permutation(1500)[:700]
    db[dst] = db[src]
    ctx = MethodContext(q_img, q_txt, db, np.arange(300))
    scores = build_method(method).prepare(ctx).scores(np.arange(300))
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32
    assert np.array_equal(scores[:, dst], scores[:, src])
    s_img, s_txt = q_img @ db.T, q_txt @ db.T
    np.testing.assert_allclose(scores, s_img + s_txt if method == "sum" else s_img * s_txt, rtol=0, atol=1e-6)


def test_distinct_rows_finds_copies_by_value_even_when_hashes_collide(monkeypatch):
    """Copies are found by a row hash checked byte for byte: −0.0 equals +0.0, a row differing in one last bit
    is distinct, and with every hash equal (a forced collision) the exact fallback gives the same groups."""
    from retrieval.methods import base

    rng = np.random.default_rng(1)
    db = rng.normal(size=(50, 6)).astype(np.float32)
    db[10] = db[3]
    db[20] = db[3]
    db[30] = np.where(db[7] == 0, 0, db[7])
    db[7, 0], db[30, 0] = 0.0, -0.0
    db[40] = db[41]
    db[40, 2] = np.nextafter(db[40, 2], np.float32(1))
    for weights in (base._row_hash_weights, lambda n: np.zeros(n, np.uint64)):
        monkeypatch.setattr(base, "_row_hash_weights", weights)
        rows, inverse = base.distinct_rows(db)
        assert len(rows) == 47 and np.array_equal(rows[inverse], db)  # -0.0 == 0.0 in array_equal
        assert inverse[10] == inverse[3] == inverse[20] and inverse[30] == inverse[7]
        assert inverse[40] != inverse[41]
        unique = rng.normal(size=(50, 6)).astype(np.float32)
        rows, inverse = base.distinct_rows(unique)
        assert rows is unique and inverse is None


def test_group_mean_subgroups_on_a_bundle_without_subgroups_is_one_error_line(tmp_path, capsys):
    """--group-mean subgroups needs query_subgroup: one line naming the bundle, the key and the option, exit 1,
    before any scoring; with subgroups the same command averages each group over them."""
    bundle = str(write(tmp_path / "b.npz"))
    assert main(["retrieve-eval", "--bundle", bundle, "--method", "image", "--group-mean", "subgroups"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{bundle}: 'query_subgroup' is missing" in err and "--group-mean subgroups" in err
    with_subgroups = str(write(tmp_path / "s.npz", query_subgroup=np.array(["s", "t", "u"])))
    out = run_json(capsys, "--bundle", with_subgroups, "--method", "image", "--group-mean", "subgroups")
    assert out["map_macro"] == pytest.approx(((0.5 + 1) / 2 + 1 / 6) / 2)


def test_weicom_scores_copies_alike_and_runs_on_numpy():
    """WeiCom on a bundle's numpy arrays returns float32 numpy scores, and a copy of a database item (scored
    once, as its row) ties with it exactly, standardisation and the float64 tails included."""
    from retrieval.methods import build_method
    from retrieval.methods.base import MethodContext

    rng = np.random.default_rng(3)
    unit = lambda n: (lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))(  # noqa: E731
        rng.normal(size=(n, 256))
    )
    db, q_img, q_txt = unit(2000), unit(50), unit(50)
    db[1000:1300] = db[:300]
    db[1500] = q_img[0]  # z about 16 for query 0 (cosines of random unit vectors: sd 1/16): float64
    db[1501] = q_img[0]
    scores = (
        build_method("weicom", {"lam": "0"})
        .prepare(MethodContext(q_img, q_txt, db, np.arange(50)))
        .scores(np.arange(50))
    )
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32
    assert np.array_equal(scores[:, 1000:1300], scores[:, :300]) and scores[0, 1500] == scores[0, 1501]
    assert scores[0, 1500] == scores[0].max() > np.partition(scores[0], -3)[-3]
