"""One unreadable image is a per-item error in `reconscore retrieve`: the item (and the queries it is the
reference of) is dropped, counted and named in run.json, and every method still runs on the rest."""

import json

import pandas as pd

from eval.cli import main
from tests.retrieval import layouts


def test_truncated_database_and_reference_images_are_skipped(tmp_path, capsys):
    root = layouts.xview2(tmp_path / "xview2")
    images = root / "test" / "images"
    post = images / "socal-fire_00000000_post_disaster.png"  # a database item (a positive)
    post.write_bytes(post.read_bytes()[:40])
    pre = images / "midwest-flooding_00000001_pre_disaster.png"  # a query's reference
    pre.write_bytes(pre.read_bytes()[:40])
    out = tmp_path / "run"
    argv = ["retrieve", "--benchmark", "xview2-cir", "--root", str(root), "--encoder", "smoke:open-clip",
            "--methods", "text,image,sum", "--out", str(out), "--device", "cpu",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 3
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "skipped 2 unreadable image" in line]
    assert len(warnings) == 1
    record = json.loads((out / "run.json").read_text())
    skipped = record["skipped_images"]
    assert skipped["count"] == 2
    assert [i["path"] for i in skipped["items"]] == sorted([f"test/images/{p.name}" for p in (post, pre)])
    assert all(p.name in i["error"] for p, i in zip(sorted([post, pre]), skipped["items"]))
    # xview2-cir: database = pre+post images, 6 queries; midwest-flooding #1's pre image is a reference
    assert record["benchmark"]["queries"] == 5 and skipped["queries_dropped"] == 1
    assert skipped["database_dropped"] == 2
    assert all(m["status"] == "ok" for m in record["methods"].values())
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert per_query["query_id"].nunique() == 5 and set(per_query["method"]) == {"text", "image", "sum"}
    assert not per_query["reference"].str.endswith(pre.name).any()
    # a rerun reads the features from the cache and still knows which images were skipped
    assert main(argv) == 3
    again = json.loads((out / "run.json").read_text())["skipped_images"]
    assert again == skipped
