"""Every loader on a synthetic dataset in its on-disk layout; the real annotation files where present."""

from collections import Counter
from pathlib import Path

import pytest

from recon_score.errors import InputError
from recon_score.registry import UnknownNameError
from retrieval.datasets import BENCHMARKS, load_benchmark
from retrieval.datasets.patterncom import file_class
from retrieval.errors import DatasetLayoutError
from retrieval.textlists import read_text_list
from tests.conftest import SHARED_DATA
from tests.retrieval import layouts

CIR = SHARED_DATA / "cir"


def positives_of(bench, qi: int) -> list[str]:
    return sorted(bench.database[d] for q, d in bench.positives if q == qi)


def test_registry_and_unknown_names(tmp_path):
    assert set(BENCHMARKS) == {"patterncom", "xview2-cir", "icir", "edir", "circo", "cirr", "fashioniq"}
    with pytest.raises(UnknownNameError, match="did you mean 'icir'"):
        load_benchmark("icirr", tmp_path)


def test_patterncom_layout_merging_and_relevance(tmp_path):
    root = layouts.patterncom(tmp_path / "PatternNet")
    bench = load_benchmark("patterncom", tmp_path)  # finds the nested PatternNet/ folder
    assert bench.root == root and len(bench.database) == 16
    assert file_class("overpass002.png") == file_class("bridge001.jpg") == "roadpass"
    # colour: airplane values {white, purple, gray}; every row queries the two values it does not have
    color = [q for q in bench.queries if q.group == "color"]
    assert len(color) == 4 * 2
    q = next(i for i, x in enumerate(bench.queries) if x.id == "color/1/purple")
    assert bench.queries[q].text == "purple" and bench.queries[q].subgroup == "airplane/purple"
    assert positives_of(bench, q) == ["images/airplane/airplane003.png"]
    # context: bridge and overpass are one class, so a bridge query for "water" finds the overpass too
    q = next(i for i, x in enumerate(bench.queries) if x.id == "context/1/water")
    assert positives_of(bench, q) == ["images/bridge/bridge002.png", "images/overpass/overpass002.png"]
    assert bench.queries[q].reference == "images/bridge/bridge001.png"  # itself never a positive
    assert {q.group for q in bench.queries} == {
        "color",
        "context",
        "density",
        "existence",
        "quantity",
        "shape",
    }
    templated = load_benchmark("patterncom", root, text_template="having {value} color", attributes="color")
    assert {q.text for q in templated.queries} == {
        "having white color",
        "having purple color",
        "having gray color",
    }


def test_patterncom_refuses_unknown_rows(tmp_path):
    root = layouts.patterncom(tmp_path)
    layouts.write_csv(root / "PatternCom" / "shape.csv", [["road999.png", "shape", "round"]])
    with pytest.raises(DatasetLayoutError, match=r"road999\.png"):
        load_benchmark("patterncom", root)
    with pytest.raises(DatasetLayoutError, match="no option 'phrasing'"):
        load_benchmark("patterncom", root, phrasing="alt1")


def test_xview2_groups_phrasings_and_database(tmp_path):
    root = layouts.xview2(tmp_path)
    bench = load_benchmark("xview2-cir", root)
    assert len(bench.queries) == 6 and len(bench.database) == 12
    assert [q.group for q in bench.queries[::2]] == ["hurricane", "wildfire", "flood"]
    assert bench.queries[2].text == "post fire"
    assert positives_of(bench, 0) == ["test/images/hurricane-harvey_00000000_post_disaster.png"]
    assert bench.queries[0].reference in bench.database  # the pre-event image is a negative
    alt = load_benchmark("xview2-cir", root, phrasing="alt1", database="post")
    assert alt.queries[2].text == "burned area" and len(alt.database) == 6
    with pytest.raises(DatasetLayoutError, match="phrasing must be one of default, alt1, alt2"):
        load_benchmark("xview2-cir", root, phrasing="alt3")


def test_icir_per_instance_databases(tmp_path):
    bench = load_benchmark("icir", layouts.icir(tmp_path))
    assert bench.protocol.ap == "trapezoidal-eps"  # utils.compute_ap: recall step 1 / (n + 1e-5)
    assert bench.protocol.method_defaults == {"product": {"rectify": "true"}}
    assert [q.db_group for q in bench.queries] == ["temple", "temple", "plushie"]
    assert Counter(bench.database_group) == {"temple": 7, "plushie": 5}
    assert positives_of(bench, 0) == [
        "database/temple_during_sunset_0.png",
        "database/temple_during_sunset_1.png",
    ]
    assert all(bench.database_group[d] == bench.queries[q].db_group for q, d in bench.positives)


def test_edir_categories_and_gallery(tmp_path):
    bench = load_benchmark("edir", layouts.edir(tmp_path), exclude_reference="true")
    assert bench.protocol.headline == ("hit@1", "hit@3")
    assert [(q.group, q.subgroup) for q in bench.queries] == [
        ("attribute", "color"),
        ("attribute", "material"),
        ("object", "addition"),
    ]
    assert positives_of(bench, 1) == ["images/tgt_1.png"] and len(bench.exclude) == 3
    (tmp_path / "gallery.txt").write_text("images/ref_0.png\n")
    with pytest.raises(DatasetLayoutError, match="is not in the gallery"):
        load_benchmark("edir", tmp_path)


def test_circo_multiple_positives(tmp_path):
    bench = load_benchmark("circo", layouts.circo(tmp_path))
    assert len(bench.database) == 6 and bench.protocol.map_at == (5, 10, 25, 50)
    assert (
        len(positives_of(bench, 0)) == 2
        and bench.queries[1].extra["semantic_aspects"] == "viewpoint|addition"
    )


def test_cirr_excludes_the_reference(tmp_path):
    bench = load_benchmark("cirr", layouts.cirr(tmp_path))
    assert bench.database[0] == "dev/dev-0-0-img0.png"
    assert bench.exclude == [(0, 0), (1, 2)] and bench.positives == [(0, 1), (1, 3)]
    assert bench.subset == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 3), (1, 4)]  # img_set members
    assert bench.protocol.subset_ks == (1, 2, 3) and "subset_hit@1" in bench.protocol.headline


def test_fashioniq_per_category_galleries(tmp_path):
    bench = load_benchmark("fashioniq", layouts.fashioniq(tmp_path))
    assert bench.queries[0].text == "is red and shorter sleeves"
    assert Counter(bench.database_group) == {"dress": 4, "shirt": 4}
    assert [q.db_group for q in bench.queries] == ["dress", "dress", "shirt", "shirt"]
    only = load_benchmark("fashioniq", tmp_path, categories="shirt")
    assert {q.group for q in only.queries} == {"shirt"}


def test_missing_images_are_named(tmp_path):
    root = layouts.xview2(tmp_path)
    (root / "test/images/socal-fire_00000001_post_disaster.png").unlink()
    with pytest.raises(DatasetLayoutError, match=r"socal-fire_00000001_post_disaster\.png"):
        load_benchmark("xview2-cir", root)


def _touch_all(root: Path, rels) -> None:
    for rel in set(rels):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")


@pytest.mark.skipif(not (CIR / "xview2_cir.csv").is_file(), reason="../shared/data/cir not present")
def test_real_xview2_table_matches_seed_table5(tmp_path):
    """The RS-CIR benchmark paper A.1 Table 5: hurricane 147, wildfire 98, flood 28, tsunami 9, earthquake 5, volcano 4 queries."""
    import csv

    with (CIR / "xview2_cir.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    _touch_all(tmp_path, [r["image"] for r in rows] + [r["target"] for r in rows])
    bench = load_benchmark("xview2-cir", tmp_path, annotations=CIR / "xview2_cir.csv")
    assert Counter(q.group for q in bench.queries) == {
        "hurricane": 147,
        "wildfire": 98,
        "flood": 28,
        "tsunami": 9,
        "earthquake": 5,
        "volcano": 4,
    }
    assert len(bench.positives) == 291 and len(bench.database) == 582


@pytest.mark.skipif(
    not (CIR / "fashioniq_cap.dress.val.json").is_file(), reason="../shared/data/cir not present"
)
def test_real_fashioniq_dress_annotations(tmp_path):
    import json
    import shutil

    for name in ("fashioniq_cap.dress.val.json", "fashioniq_split.dress.val.json"):
        shutil.copy(CIR / name, tmp_path / name)
    asins = set(json.loads((CIR / "fashioniq_split.dress.val.json").read_text()))
    asins |= {r["candidate"] for r in json.loads((CIR / "fashioniq_cap.dress.val.json").read_text())}
    _touch_all(tmp_path, [f"images/{a}.png" for a in asins])
    bench = load_benchmark("fashioniq", tmp_path, categories="dress")
    assert len(bench.queries) == 2017 and len(bench.database) == 3817 and len(bench.positives) == 2017


@pytest.mark.skipif(not (CIR / "cirr_cap.rc2.val.json").is_file(), reason="../shared/data/cir not present")
def test_real_cirr_annotations(tmp_path):
    import json
    import shutil

    for name in ("cirr_cap.rc2.val.json", "cirr_split.rc2.val.json"):
        shutil.copy(CIR / name, tmp_path / name)
    _touch_all(tmp_path, json.loads((CIR / "cirr_split.rc2.val.json").read_text()).values())
    bench = load_benchmark("cirr", tmp_path)
    assert len(bench.queries) == 4181 and len(bench.database) == 2297 and len(bench.exclude) == 4181
    assert len(bench.subset) == 6 * 4181 and set(bench.positives) <= set(bench.subset)


@pytest.mark.skipif(
    not (CIR / "openimages_boxable_classes.csv").is_file(), reason="../shared/data/cir not present"
)
def test_real_word_lists():
    vocab = read_text_list(CIR / "openimages_boxable_classes.csv")
    assert len(vocab) == 601 and vocab[0] == "Tortoise"  # the "class" column, header dropped
    subjects = read_text_list(CIR / "icir_generic_subjects.csv")
    assert subjects[0] == "Abacus" and "object_name" not in subjects
    assert read_text_list(CIR / "icir_generic_styles.csv")[0] == "watercolor painting"


def test_patterncom_subgroups_are_class_value_pairs_and_both_averagings(tmp_path):
    """'white' of airplanes and 'white' of residential areas are two subgroups (the RS-CIR benchmark paper Table 4 lists
    (class, value) pairs). The two averagings, re-derived here from rscir's evaluate.py (one list per attribute
    of every (query, value) AP, averaged once, then the attributes) and from the papers' caption (subgroup,
    then attribute, then across attributes)."""
    import numpy as np

    from retrieval.aggregate import summarize

    root = layouts.patterncom(tmp_path)
    layouts.write_csv(
        root / "PatternCom" / "color.csv",
        [
            ["airplane001.png", "color", "white"],
            ["airplane002.png", "color", "white"],
            ["airplane003.png", "color", "gray"],
            ["denseresidential001.png", "color", "white"],
            ["denseresidential002.png", "color", "red"],
            ["denseresidential003.png", "color", "red"],
        ],
    )
    bench = load_benchmark("patterncom", root)
    color = [q for q in bench.queries if q.group == "color"]
    assert {q.subgroup for q in color} == {
        "airplane/white",
        "airplane/gray",
        "residential/white",
        "residential/red",
    }
    values = np.random.default_rng(0).random(len(bench.queries))
    groups = [q.group for q in bench.queries]
    subs = [q.subgroup for q in bench.queries]
    # rscir: per attribute, mean over its (query image, target value) APs; then mean over attributes
    per_attr: dict[str, list[float]] = {}
    for q, v in zip(bench.queries, values):
        per_attr.setdefault(q.group, []).append(v)
    rscir = np.mean([np.mean(v) for v in per_attr.values()])
    # captions: per (class, value), then per attribute, then across attributes
    nested: dict[str, dict[tuple[str, str], list[float]]] = {}
    for q, v in zip(bench.queries, values):
        target = q.id.rsplit("/", 1)[1]
        nested.setdefault(q.group, {}).setdefault((q.extra["class"], target), []).append(v)
    caption = np.mean([np.mean([np.mean(x) for x in d.values()]) for d in nested.values()])
    pooled_white = np.mean([np.mean([np.mean(x) for x in _by_value(d).values()]) for d in nested.values()])
    by_queries = summarize(values, groups, subgroups=subs, group_mean="queries")
    by_subgroups = summarize(values, groups, subgroups=subs, group_mean="subgroups")
    assert by_queries.macro == pytest.approx(rscir, abs=1e-12)
    assert by_subgroups.macro == pytest.approx(caption, abs=1e-12)
    assert abs(caption - pooled_white) > 1e-6  # keying by the value alone would give another number


def _by_value(d: dict) -> dict:
    out: dict[str, list[float]] = {}
    for (_cls, value), xs in d.items():
        out.setdefault(value, []).extend(xs)
    return out


def test_edir_keeps_the_reference_as_seed_001_does_and_cirr_excludes_it(tmp_path):
    """The EDIR paper appendix B: "CIRR excludes the reference image from the retrieval corpus"; EDIR is scored on
    its gallery as released, so a reference in the gallery stays a (hard) negative unless asked otherwise."""
    edir = load_benchmark("edir", layouts.edir(tmp_path / "edir"))
    assert edir.exclude == [] and edir.options["exclude_reference"] is False
    assert any("3 of 3 reference images are in the gallery: ranked as negatives" in n for n in edir.notes)
    refs = [edir.database.index(q.reference) for q in edir.queries]
    excluded = load_benchmark("edir", tmp_path / "edir", exclude_reference="true")
    assert sorted(excluded.exclude) == sorted(enumerate(refs))
    cirr = load_benchmark("cirr", layouts.cirr(tmp_path / "cirr"))
    assert cirr.exclude and all(cirr.database[d] == cirr.queries[q].reference for q, d in cirr.exclude)


def test_repeated_queries_are_refused_naming_their_lines(tmp_path):
    """EDIR: two records with one id; i-CIR: one query row twice (same instance, image and text)."""
    root = layouts.edir(tmp_path / "edir")
    lines = (root / "edir.jsonl").read_text().splitlines()
    (root / "edir.jsonl").write_text("\n".join([*lines, "", lines[0]]) + "\n")  # a blank line, then q0 again
    with pytest.raises(InputError, match=r"repeated query id\(s\): 'q0' at line 1 and line 5"):
        load_benchmark("edir", root)
    root = layouts.icir(tmp_path / "icir")
    rows = (root / "query_files.csv").read_text().splitlines()
    (root / "query_files.csv").write_text("image_path,text,instance\n" + "\n".join([*rows, rows[1]]) + "\n")
    with pytest.raises(InputError, match=r"repeated query\(s\): .* at row 3 and row 5"):
        load_benchmark("icir", root)


# benchmark -> (options, rule, queries whose reference is a database item, of them excluded), on the layouts
QUERY_IMAGE_CASES = {
    "patterncom": ({}, "kept", "all", 0),
    "xview2-cir": ({}, "kept", "all", 0),
    "xview2-cir/post": ({"database": "post"}, "absent", 0, 0),
    "icir": ({}, "absent", 0, 0),
    "edir": ({}, "kept", "all", 0),
    "edir/exclude": ({"exclude_reference": "true"}, "excluded", "all", "all"),
    "circo": ({}, "kept", "all", 0),
    "cirr": ({}, "excluded", "all", "all"),
    "fashioniq": ({}, "kept", "all", 0),
}
LAYOUT_OF = {"xview2-cir": layouts.xview2}


@pytest.mark.parametrize("case", QUERY_IMAGE_CASES)
def test_each_benchmark_treats_the_query_image_as_its_authors_do(case, tmp_path):
    """The rule of docs/retrieval.md's table per benchmark, its source named, and the counts run.json records:
    what the layout holds (by path), what the rule removed (exactly the reference items under ``excluded``)."""
    name = case.split("/")[0]
    options, rule, in_db, excluded = QUERY_IMAGE_CASES[case]
    make = LAYOUT_OF.get(name) or getattr(layouts, name.replace("-", ""))
    bench = load_benchmark(name, make(tmp_path), **options)
    facts = bench.summary()["query_image"]
    assert bench.query_image.rule == rule == facts["rule"] and facts["source"] == bench.query_image.source
    refs = [
        (q, bench.database.index(x.reference))
        for q, x in enumerate(bench.queries)
        if x.reference in bench.database
    ]
    n = len(bench.queries)
    assert facts["queries"] == n
    assert facts["references_in_database"] == (n if in_db == "all" else in_db) == len(refs)
    assert facts["excluded"] == (n if excluded == "all" else excluded)
    assert (set(refs) <= set(bench.exclude)) == (rule == "excluded" or not refs)


def _edir_json(root: Path, text: str) -> None:
    (root / "edir.jsonl").unlink()
    (root / "edir.json").write_text(text)


def _edir_line_a_string(root: Path) -> None:
    path = root / "edir.jsonl"
    path.write_text(path.read_text() + '"just a string"\n')


def _cirr_caption_without_caption(root: Path) -> None:
    path = root / "captions" / "cap.rc2.val.json"
    path.write_text(path.read_text().replace('"caption": "fewer", ', ""))


MALFORMED = {
    "edir .json without queries": (
        "edir", layouts.edir, lambda r: _edir_json(r, '{"foo": []}'), (),
        "edir.json: expected a JSON list of query records, or an object whose 'queries' is one",
    ),
    "edir .json queries not a list": (
        "edir", layouts.edir, lambda r: _edir_json(r, '{"queries": 5}'), (),
        "edir.json: expected a JSON list of query records, or an object whose 'queries' is one",
    ),
    "edir .jsonl line a string": (
        "edir", layouts.edir, _edir_line_a_string, (),
        'edir.jsonl: line 4 is a JSON str, not a query record',
    ),
    "cirr caption without caption": (
        "cirr", layouts.cirr, _cirr_caption_without_caption, (),
        "cap.rc2.val.json: item 2: missing 'caption'",
    ),
    "cirr captions a dict": (
        "cirr", layouts.cirr, lambda r: (r / "captions" / "cap.rc2.val.json").write_text('{"a": 1}'), (),
        "cap.rc2.val.json: expected a JSON list, got dict",
    ),
    "icir annotations a file": (
        "icir", layouts.icir, lambda r: None, ("--annotations", "{root}/query_files.csv"),
        "query_files.csv is not a folder; give the folder that holds query_files.csv and database_files.csv",
    ),
    "patterncom template with another field": (
        "patterncom", layouts.patterncom, lambda r: None, ("--option", "text_template=a {value} {object}"),
        "text_template must contain {value} and no other field",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_benchmark_files_are_one_line(case, tmp_path, capsys):
    """A benchmark file of the wrong shape, or an option that cannot be filled, is one line naming the file and
    the place (exit 1, before any encoder), never a KeyError or TypeError traceback."""
    from eval.cli import main

    benchmark, builder, mutate, extra, expected = MALFORMED[case]
    root = builder(tmp_path / "bench")
    mutate(root)
    extra = [a.replace("{root}", str(root)) for a in extra]
    argv = ["retrieve", "--benchmark", benchmark, "--root", str(root), "--encoder", "smoke:open-clip",
            "--methods", "sum", "--out", str(tmp_path / "out"), *extra]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and expected in last and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_repeated_database_entry_is_refused_naming_it(tmp_path):
    """A path listed twice in the gallery used to load: the index kept the last copy, so the first ranked as a
    negative of its own query. Every loader's shared check refuses it, naming both places."""
    root = layouts.edir(tmp_path / "edir")
    gallery = root / "gallery.txt"
    gallery.write_text(gallery.read_text() + "images/tgt_0.png\n")
    with pytest.raises(DatasetLayoutError) as err:
        load_benchmark("edir", root)
    assert str(err.value) == (
        f"EDIR: database image 'images/tgt_0.png' is listed twice ({gallery}:2 and {gallery}:10); list each once"
    )
    root = layouts.icir(tmp_path / "icir")
    rows = root / "database_files.csv"
    rows.write_text(rows.read_text() + rows.read_text().splitlines()[0] + "\n")
    with pytest.raises(
        DatasetLayoutError, match=r"listed twice in database group 'temple' \(.*csv:1 and .*csv:13\)"
    ):
        load_benchmark("icir", root)
