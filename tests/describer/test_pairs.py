"""`reconscore pairs`: policies, margins and the seed-noise filter on a hand-written describe run (no models);
the dataset read back with `datasets` as TRL reads it."""

import json
import statistics
from pathlib import Path

import pytest

from describer.pairs import (
    BELOW_MARGIN,
    DUPLICATE,
    TIE,
    UNPAIRED,
    WITHIN_NOISE,
    Candidate,
    candidate_pairs,
    keep_pair,
    paired_critical_value,
    paired_t,
)
from eval.cli import main
from recon_score.atomic_io import atomic_write_bytes, jsonl_bytes, write_json_atomic

SAMPLE = Path(__file__).resolve().parents[2] / "recon_score" / "sample"


def _cand(i: int, score: float, per_seed=None, caption=None) -> Candidate:
    return Candidate("img", "a.png", i, caption or f"caption {i}", score, per_seed, None)


def test_policies_pair_by_score_not_by_index():
    cands = [_cand(0, 50.0), _cand(1, 70.0), _cand(2, 40.0), _cand(3, 60.0)]
    idx = {
        p: [(h.index, lo.index) for h, lo in candidate_pairs(cands, p)]
        for p in ("best-worst", "best-vs-each")
    }
    assert idx["best-worst"] == [(1, 2)]
    assert idx["best-vs-each"] == [(1, 3), (1, 0), (1, 2)]
    every = [(h.index, lo.index) for h, lo in candidate_pairs(cands, "all")]
    assert len(every) == 6 and all(h.score > lo.score for h, lo in candidate_pairs(cands, "all"))
    assert candidate_pairs([_cand(0, 1.0)], "all") == []


def test_keep_pair_reasons():
    assert keep_pair(_cand(0, 60.0), _cand(1, 50.0), min_margin=0, noise="std") is None
    assert keep_pair(_cand(0, 50.0), _cand(1, 50.0), min_margin=0, noise="std") == TIE
    assert keep_pair(_cand(0, 51.0), _cand(1, 50.0), min_margin=2, noise="std") == BELOW_MARGIN
    same = keep_pair(
        _cand(0, 60.0, caption="a farm"), _cand(1, 50.0, caption="a farm "), min_margin=0, noise="std"
    )
    assert same == DUPLICATE
    # margin 3; the rejected caption's seeds spread 40, 50, 45 (std 5), but the differences 8, -2, 3 (same seeds)
    # have mean 3 and sd 5: paired t = 1.04 < t(0.90, 2 df) = 1.89 -> within noise
    noisy = _cand(1, 45.0, per_seed=[40.0, 50.0, 45.0])
    assert (
        keep_pair(_cand(0, 48.0, per_seed=[48.0, 48.0, 48.0]), noisy, min_margin=0, noise="paired")
        == WITHIN_NOISE
    )
    # the same spread shared by both captions (the seeds' common effect) cancels: differences 3, 3.5, 2.5
    shared = _cand(0, 48.0, per_seed=[43.0, 53.5, 47.5])
    assert keep_pair(shared, noisy, min_margin=0, noise="paired") is None
    assert keep_pair(_cand(0, 48.0), noisy, min_margin=0, noise="off") is None
    assert keep_pair(_cand(0, 48.0, per_seed=[48.0, 48.0]), noisy, min_margin=0, noise="paired") == UNPAIRED


def test_paired_t_is_scipys_paired_test():
    from scipy import stats

    hi, lo = [64.5, 61.2, 57.2, 60.0], [64.5, 60.1, 56.1, 59.7]
    assert paired_t(hi, lo) == pytest.approx(stats.ttest_rel(hi, lo).statistic)
    assert paired_critical_value(3) == pytest.approx(stats.t.ppf(0.90, 2)) == pytest.approx(1.8856, abs=1e-4)
    assert paired_t([2.0, 3.0], [1.0, 2.0]) == float("inf")  # every difference 1: no noise at all


# 4 images x 3 candidates, K = 3 seeds with a shared seed effect (+4, 0, -4) and small caption differences:
# every one of the 12 pairs has a margin below one of its captions' per-seed std (the old rule dropped all 12);
# 4 of them have paired t >= 2.
SHARED_SEEDS = {
    "A": [[64.5, 61.2, 57.2], [64.5, 60.1, 56.1], [64.8, 59.8, 55.9]],
    "B": [[62.9, 59.2, 54.6], [64.6, 60.1, 56.4], [63.5, 59.4, 56.5]],
    "C": [[64.9, 61.1, 55.8], [64.2, 59.7, 56.0], [63.8, 60.1, 55.9]],
    "D": [[63.8, 58.9, 55.0], [64.1, 59.8, 56.7], [64.2, 59.9, 55.9]],
}


def test_shared_seed_effect_keeps_pairs_with_a_clear_paired_difference():
    from scipy import stats

    cands = {
        img: [_cand(i, statistics.fmean(v), per_seed=v, caption=f"{img} {i}") for i, v in enumerate(rows)]
        for img, rows in SHARED_SEEDS.items()
    }
    pairs = [p for cs in cands.values() for p in candidate_pairs(cs, "all")]
    assert len(pairs) == 12
    assert all(
        hi.score - lo.score <= max(statistics.stdev(hi.per_seed), statistics.stdev(lo.per_seed))
        for hi, lo in pairs
    )
    t = [stats.ttest_rel(hi.per_seed, lo.per_seed).statistic for hi, lo in pairs]
    assert sum(x >= 2 for x in t) == 4
    kept = [keep_pair(hi, lo, min_margin=0, noise="paired") is None for hi, lo in pairs]
    assert kept == [x > stats.t.ppf(0.90, 2) for x in t] and sum(kept) == 4


def _fake_run(tmp_path: Path) -> Path:
    """A describe run folder as `reconscore describe --selection-seeds 3 --eval-candidates all` writes it,
    with chosen values, on two bundled images (a third image's file is missing)."""
    run = tmp_path / "run"
    rows = []
    table = {
        "UCM_1": [
            (60.0, [59.0, 60.0, 61.0], 58.0),
            (50.0, [49.0, 50.0, 51.0], 51.0),
            (40.0, [20, 40, 60], 45.0),
        ],
        "UCM_2": [(55.0, [55.0, 55.5, 54.5], 57.0), (54.0, [53.0, 55.0, 54.0], 50.0), (None, None, None)],
        "gone": [(70.0, [70.0, 70.0, 70.0], 70.0), (30.0, [30.0, 30.0, 30.0], 30.0)],
    }
    for image_id, cands in table.items():
        for k, (score, per_seed, held_out) in enumerate(cands):
            rows.append(
                {
                    "image_id": image_id,
                    "image": f"images/{image_id}.tif",
                    "index": k,
                    "caption": f"{image_id} caption {k}" if score is not None else None,
                    "error": None if score is not None else "empty generation",
                    "selection_score": score,
                    "selection_per_seed": per_seed,
                    "recon_score": held_out,
                }
            )
    atomic_write_bytes(run / "candidates.jsonl", jsonl_bytes(rows))
    write_json_atomic(
        run / "run.json",
        {
            "command": "describe",
            "images_root": str(SAMPLE),
            "preset": {"prompt": "Describe this image."},
            "selection": {"selection_seeds": [0, 11, 12], "eval_seed": 42},
            "bands": None,
            "meaningless": False,
        },
    )
    return run


def test_pairs_command_writes_a_trl_preference_dataset(tmp_path, capsys):
    from datasets import load_dataset

    run, out = _fake_run(tmp_path), tmp_path / "pairs"
    rc = main(["pairs", str(run), "--out", str(out), "--policy", "all"])
    printed = capsys.readouterr()
    assert rc == 3 and "gone" in printed.err  # the missing image is named, the rest is written
    ds = load_dataset(str(out), split="train")
    # UCM_1: 60>50 kept (differences 10, 10, 10); 60>40 (paired t 1.82) and 50>40 (0.91) within noise
    # UCM_2: 55>54 kept (differences 2, 0.5, 0.5: paired t 2.0 > 1.89); its failed candidate skipped
    assert len(ds) == 2
    row = ds[0]
    assert row["image"].size == (256, 256)  # decoded as a PIL image by the Image feature
    assert row["prompt"] == [
        {
            "role": "user",
            "content": [{"type": "image", "text": None}, {"type": "text", "text": "Describe this image."}],
        }
    ]
    assert row["chosen"] == [{"role": "assistant", "content": [{"type": "text", "text": "UCM_1 caption 0"}]}]
    assert row["rejected"][0]["content"][0]["text"] == "UCM_1 caption 1"
    assert (row["chosen_score"], row["rejected_score"], row["margin"]) == (60.0, 50.0, 10.0)
    assert row["chosen_per_seed"] == [59.0, 60.0, 61.0] and row["chosen_noise"] == pytest.approx(1.0)
    assert row["selection_seeds"] == [0, 11, 12] and row["eval_seed"] == 42
    assert (row["chosen_recon_score"], row["rejected_recon_score"]) == (58.0, 51.0)
    assert row["source_run"] == str(run.resolve()) and row["policy"] == "all"
    meta = json.loads((out / "run.json").read_text())
    assert meta["counts"]["pairs"] == 2
    # UCM_1: 2 within noise; gone: 1 kept pair lost with its image
    assert meta["dropped"] == {WITHIN_NOISE: 2}
    assert meta["skipped"] == {"candidate without a caption (generation failed)": 1}
    assert meta["held_out_agreement"] == {"pairs": 2, "agree": 2}
    assert f"dropped 2 pairs: {WITHIN_NOISE}" in printed.out
    assert meta["provenance"]["argv"]


def test_noise_off_and_min_margin(tmp_path, capsys):
    from datasets import load_dataset

    run, out = _fake_run(tmp_path), tmp_path / "pairs"
    assert (
        main(["pairs", str(run), "--out", str(out), "--policy", "all", "--noise", "off", "--min-margin", "5"])
        == 3
    )
    ds = load_dataset(str(out), split="train")
    assert sorted((r["chosen_index"], r["rejected_index"]) for r in ds) == [(0, 1), (0, 2), (1, 2)]
    assert json.loads((out / "run.json").read_text())["dropped"] == {BELOW_MARGIN: 1}
    # a rerun with another policy replaces the dataset (never mixes two)
    assert main(["pairs", str(run), "--out", str(out), "--noise", "off"]) == 3
    assert len(load_dataset(str(out), split="train")) == 2  # UCM_1 and UCM_2 best-worst
    # every pair dropped: exit 3 with the reasons, nothing written (the previous dataset stays as it was) ...
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["pairs", str(run), "--out", str(out), "--min-margin", "100"]) == 3
    assert "no pair was kept, so nothing was written" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # ... and a new --out is not created: no folder a loader would take for a dataset of the record
    assert main(["pairs", str(run), "--out", str(tmp_path / "none"), "--min-margin", "100"]) == 3
    assert not (tmp_path / "none").exists()


def test_the_dataset_folder_loads_as_pairs_only(tmp_path):
    """The record (run.json), the lock and the invocation log lie outside data/: `load_dataset(OUT)` reads the
    shards and nothing else."""
    from datasets import load_dataset

    run, out = _fake_run(tmp_path), tmp_path / "pairs"
    assert main(["pairs", str(run), "--out", str(out), "--noise", "off"]) == 3
    assert (out / "run.json").is_file() and sorted(p.name for p in (out / "data").iterdir()) == [
        "train-00000.parquet"
    ]
    ds = load_dataset(str(out))
    assert list(ds) == ["train"] and len(ds["train"]) == 2
    assert {"image", "prompt", "chosen", "rejected"} <= set(ds["train"].column_names)


def test_a_folder_that_is_not_a_run_is_named(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert (
        main(["pairs", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 1
    )  # no input could be read
    assert "no candidates.jsonl" in capsys.readouterr().err
    run = _fake_run(tmp_path)  # beside a readable run: named, and the rest is paired and written (exit 3)
    assert (
        main(["pairs", str(tmp_path / "empty"), str(run), "--noise", "off", "--out", str(tmp_path / "o")])
        == 3
    )
    assert "no candidates.jsonl" in capsys.readouterr().err and (tmp_path / "o" / "data").is_dir()


def test_a_scored_table_needs_its_prompt_and_k1_skips_the_noise_filter(tmp_path, capsys):
    from datasets import load_dataset

    table = tmp_path / "scored.jsonl"
    rows = [
        {"image_id": "UCM_3", "image": "images/UCM_3.tif", "caption": c, "selection_score": s, "index": i}
        for i, (c, s) in enumerate([("a dense forest", 71.5), ("a beach", 40.0), ("trees", 55.0)])
    ]
    atomic_write_bytes(table, jsonl_bytes(rows))
    out = tmp_path / "p"
    assert (
        main(["pairs", str(table), "--images", str(SAMPLE), "--out", str(out)]) == 1
    )  # its only input unusable
    assert "pass --prompt" in capsys.readouterr().err
    argv = ["pairs", str(table), "--images", str(SAMPLE), "--prompt", "brief", "--out", str(out)]
    assert main(argv) == 0
    assert "not applied" in capsys.readouterr().out  # no per-seed scores: the filter cannot run, and says so
    (row,) = load_dataset(str(out), split="train")
    assert row["chosen"][0]["content"][0]["text"] == "a dense forest" and row["margin"] == 31.5
    assert row["prompt"][0]["content"][1]["text"].startswith("Describe this remote sensing image")
    assert row["chosen_noise"] is None and row["selection_seeds"] is None


def _table_line(caption, score, index, **extra) -> str:
    row = {"image_id": "UCM_3", "image": "images/UCM_3.tif", "caption": caption, "selection_score": score}
    return json.dumps({**row, "index": index, **extra})


def test_a_table_is_not_a_journal_every_line_is_read_or_named(tmp_path, capsys):
    """No final newline: the last row (the best caption) is read. Bad values: each line is named with its field,
    the good rows are still paired. Booleans are not scores; NaN, 1e400-like integers and strings neither."""
    from datasets import load_dataset

    lines = [
        _table_line("a beach", 40.0, 0),
        _table_line("trees", 55.0, 1),
        _table_line("x", 50.0, 3, selection_per_seed=[float("nan"), 99]),  # json.dumps writes NaN
        _table_line("x", 50.0, 4, selection_per_seed=5),
        _table_line("x", 50.0, 5, selection_per_seed=["a"]),
        '{"image": "images/UCM_3.tif", "caption": "x", "selection_score": 50, "index": "abc"}',
        '{"image": "images/UCM_3.tif", "caption": "x", "selection_score": 50, "index": NaN}',
        '{"image": ["images/UCM_3.tif"], "caption": "x", "selection_score": 50}',
        '{"image": 5, "caption": "x", "selection_score": 50}',
        '{"image": "images/UCM_3.tif", "caption": "x", "selection_score": 1' + "0" * 400 + "}",
        '{"image": "images/UCM_3.tif", "caption": "x", "selection_score": true}',
        '{"image": "images/UCM_3.tif", "caption": "x", "selection_score": false}',
        "{not json",
        "[1, 2]",
        _table_line("a dense forest", 71.5, 2),
    ]
    table = tmp_path / "scored.jsonl"
    table.write_text("\n".join(lines), encoding="utf-8")  # no final newline
    out = tmp_path / "p"
    argv = ["pairs", str(table), "--images", str(SAMPLE), "--prompt", "brief", "--out", str(out)]
    assert main(argv) == 3
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err and "3 scored candidates" in printed.out
    expected = {
        3: "field 'selection_per_seed[0]' must be a finite number, got NaN",
        4: "field 'selection_per_seed' must be a list of numbers, got 5",
        5: "field 'selection_per_seed[0]' must be a number, got \"a\"",
        6: "field 'index' must be an integer, got \"abc\"",
        7: "field 'index' must be an integer, got NaN",
        8: "field 'image' must be a non-empty string",
        9: "field 'image' must be a non-empty string",
        10: "field 'selection_score' must be a finite number, got 1000",
        11: "field 'selection_score' must be a number, got true",
        12: "field 'selection_score' must be a number, got false",
        13: "invalid JSON",
        14: "not a candidate row",
    }
    failures = json.loads((out / "run.json").read_text())["failures"]
    assert len(failures) == len(expected)
    for line, words in expected.items():
        assert any(f.startswith(f"{table}:{line}: {words}") for f in failures), (line, failures)
        assert f"{table}:{line}: " in printed.err
    (row,) = load_dataset(str(out), split="train")
    assert row["chosen"][0]["content"][0]["text"] == "a dense forest"  # the unterminated last line


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        ('{"note": "caf\u00e9"}'.encode("latin-1"), "not valid utf-8 text"),
        (b'{"bands": 5, "meaningless": false}', "field 'bands' must be a list of integers, got 5"),
        (b'{"selection": "abc", "meaningless": false}', "field 'selection' must be an object, got \"abc\""),
        (b'{"preset": [1], "meaningless": false}', "field 'preset' must be an object, got [1]"),
        (
            b'{"selection": {"selection_seeds": [0, "a"]}, "meaningless": false}',
            "field 'selection.selection_seeds' must be a list",
        ),
    ],
)
def test_a_bad_run_json_fails_that_run_alone(tmp_path, capsys, content, words):
    run = _fake_run(tmp_path)
    (run / "run.json").write_bytes(content)
    good = tmp_path / "scored.jsonl"
    atomic_write_bytes(
        good, jsonl_bytes([json.loads(_table_line("trees", 55.0, 0)), json.loads(_table_line("a", 40.0, 1))])
    )
    out = tmp_path / "p"
    argv = ["pairs", str(run), str(good), "--images", str(SAMPLE), "--prompt", "brief", "--out", str(out)]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"{run / 'run.json'}" in err and words in err and "Traceback" not in err
    assert json.loads((out / "run.json").read_text())["counts"]["pairs"] == 1  # the table's pair


def test_the_same_run_twice_is_refused(tmp_path, capsys):
    run = _fake_run(tmp_path)
    for twice in ([run, run], [run, run / "candidates.jsonl"]):
        assert main(["pairs", *map(str, twice), "--out", str(tmp_path / "p")]) == 1
        err = capsys.readouterr().err
        assert f"{twice[1]} and {twice[0]} are the same candidates table" in err
    assert not (tmp_path / "p").exists()  # refused before anything was written


def test_pairs_from_a_meaningless_run_say_so(tmp_path, capsys):
    """Pairs read from a smoke describe run are as meaningless as it: the record says so, and so does stderr."""
    from recon_score.presets import SMOKE_NOTE

    run = _fake_run(tmp_path)
    assert main(["pairs", str(run), "--out", str(tmp_path / "real"), "--policy", "all"]) == 3
    assert SMOKE_NOTE not in capsys.readouterr().err
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, "meaningless": True}))
    assert main(["pairs", str(run), "--out", str(tmp_path / "smoke"), "--policy", "all"]) == 3
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"{SMOKE_NOTE}."
    assert json.loads((tmp_path / "smoke" / "run.json").read_text())["meaningless"] is True


def test_a_score_run_table_pairs_the_captions_of_each_image(tmp_path, capsys):
    """`reconscore score`'s scores.jsonl has a per-caption `id` (UCM_1#0) and no `image_id`: its captions are
    grouped by `image` (grouping by `id` made every caption its own image, and no pair)."""
    from datasets import load_dataset

    from tests.smoke_cli import smoke

    rows = [json.loads(x) for x in (SAMPLE / "captions.jsonl").read_text().splitlines()]
    caps = tmp_path / "caps.jsonl"
    mine = [r for r in rows if r["image"] in ("images/UCM_1.tif", "images/UCM_2.tif")][::2]
    caps.write_text("".join(json.dumps(r) + "\n" for r in mine))
    run = tmp_path / "s"
    assert main(smoke("score", run, "--captions", str(caps), "--images", str(SAMPLE), "--no-cache")) == 0
    table = run / "scores.jsonl"
    out = tmp_path / "p"
    argv = ["pairs", str(table), "--score", "recon_score", "--images", str(SAMPLE), "--prompt", "brief"]
    assert main([*argv, "--out", str(out)]) == 0
    ds = load_dataset(str(out), split="train")
    assert sorted(ds["image_id"]) == ["images/UCM_1.tif", "images/UCM_2.tif"]  # best against worst of each
    scored = [json.loads(x) for x in table.read_text().splitlines()]
    for row in ds:
        own = [r for r in scored if r["image"] == row["image_id"]]
        assert row["chosen"][0]["content"][0]["text"] == max(own, key=lambda r: r["recon_score"])["caption"]
        assert row["chosen_index"] != row["rejected_index"]  # table order within the image


def test_held_out_ranking_filters_by_its_own_per_seed_values(tmp_path, capsys):
    """`--score recon_score` orders pairs by the held-out render: the noise filter tests recon_score's own
    per-seed values (none in a describe run: not applied, and said so), never the selection renders' (which
    dropped 2 of UCM_1's pairs "within the seed noise" of another score), and no held-out agreement line
    (always N/N when the held-out score is what ranks)."""
    from datasets import load_dataset

    run, out = _fake_run(tmp_path), tmp_path / "pairs"
    assert main(["pairs", str(run), "--out", str(out), "--policy", "all", "--score", "recon_score"]) == 3
    printed = capsys.readouterr().out
    assert "not applied: no candidate has per-seed recon_score (recon_score_per_seed" in printed
    assert "held-out recon_score orders" not in printed
    assert json.loads((out / "run.json").read_text())["held_out_agreement"] is None
    ds = load_dataset(str(out), split="train")
    assert len(ds) == 4 and all(r["chosen_per_seed"] is None for r in ds)  # UCM_1: 3 pairs, UCM_2: 1
    # a score table (`score --seeds K`): recon_score_per_seed is what the filter tests
    rows = [
        {
            "image": "images/UCM_3.tif",
            "caption": "a",
            "recon_score": 60.0,
            "recon_score_per_seed": [70, 50, 60],
        },
        {
            "image": "images/UCM_3.tif",
            "caption": "b",
            "recon_score": 55.0,
            "recon_score_per_seed": [56, 54, 55],
        },
    ]
    for r in rows:  # selection renders that would keep the pair: not what orders it
        r["selection_per_seed"] = [r["recon_score"] + k for k in (0, 10, 20)]
    table = tmp_path / "scored.jsonl"
    atomic_write_bytes(table, jsonl_bytes(rows))
    argv = ["pairs", str(table), "--score", "recon_score", "--images", str(SAMPLE), "--prompt", "brief"]
    assert main([*argv, "--out", str(tmp_path / "t")]) == 3  # differences 14, -4, 5: within the noise
    assert (
        "paired t of the per-seed differences of recon_score (recon_score_per_seed)"
        in capsys.readouterr().out
    )
