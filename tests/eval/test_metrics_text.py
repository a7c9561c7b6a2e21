"""Reference-based metrics: hand-checked tiny cases, and agreement with pycocoevalcap called directly."""

import math
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from eval.metrics import METRICS, CaptionBatch, build_metric, compute_metrics
from eval.metrics.meteor import Meteor
from eval.metrics.ptb import ptb_tokenize
from preference_data import load_flickr8k_expert
from tests.eval.metric_helpers import DATA, shared_meteor

TEXT = ["bleu1", "bleu2", "bleu3", "bleu4", "rouge", "cider", "meteor"]


@pytest.fixture(scope="module")
def meteor():
    return Meteor(process=shared_meteor())


@pytest.fixture(scope="module")
def tiny(meteor):
    """Row 0 equals its only reference, row 1 shares no word with its reference, row 2 overlaps partly; row 3
    has no references and row 4 no candidate."""
    batch = CaptionBatch(
        candidates=[
            "A man rides a brown horse on the beach.",
            "zebra zebra",
            "a dog runs on the grass",
            "a dog",
            None,
        ],
        references=[
            ["A man rides a brown horse on the beach."],
            ["a cat sleeps on the sofa"],
            ["a dog is running across the green grass", "the dog plays"],
            [],
            ["a dog"],
        ],
    )
    table, report = compute_metrics(TEXT, batch, metrics={"meteor": meteor})
    return table, report


def test_identical_caption_gets_the_maximum(tiny):
    table, _ = tiny
    row = table.iloc[0]
    for n in (1, 2, 3, 4):
        assert row[f"bleu{n}"] == pytest.approx(1.0, abs=1e-6)
    assert row["rouge"] == pytest.approx(1.0)
    # CIDEr-D of a caption equal to its single reference: cosine 1 for n = 1..4, no length penalty -> 10
    assert row["cider"] == pytest.approx(10.0)
    # METEOR 1.5: F-mean 1, and an exact match (one chunk covering everything) carries no fragmentation penalty
    assert row["meteor"] == pytest.approx(1.0)


def test_disjoint_caption_gets_zero(tiny):
    table, _ = tiny
    row = table.iloc[1]
    for name in TEXT:
        assert row[name] == pytest.approx(0.0, abs=1e-6), name


def test_identical_and_disjoint_captions_reach_the_ends_of_each_entrys_range(tiny):
    """The registry's numeric range (which clips CIs) is what pycocoevalcap and the METEOR jar compute at the
    extremes: an identical caption scores its upper bound, a disjoint one its lower bound, nothing lies outside."""
    table, _ = tiny
    for name in TEXT:
        low, high = METRICS[name].value_range
        assert table[name].iloc[0] == pytest.approx(high, abs=1e-6), name
        assert table[name].iloc[1] == pytest.approx(low, abs=1e-6), name
        values = table[name].iloc[:3]
        assert ((values >= low - 1e-9) & (values <= high + 1e-9)).all(), name


def test_partial_overlap_is_in_between(tiny):
    table, _ = tiny
    for name in TEXT:
        assert table[name].iloc[1] <= table[name].iloc[2] <= table[name].iloc[0], name
    assert table["bleu1"].iloc[2] > table["bleu4"].iloc[2]


def test_rows_without_references_or_candidate_are_nan(tiny):
    table, report = tiny
    for name in TEXT:
        assert math.isnan(table[name].iloc[3]) and math.isnan(table[name].iloc[4]), name
    assert report["cider"]["idf_documents"] == 3
    assert (
        "evaluated corpus" in report["cider"]["config"]["idf_corpus"]
        or "this run" in report["cider"]["config"]["idf_corpus"]
    )


def test_ptb_tokenization_lowercases_and_drops_punctuation():
    out = ptb_tokenize(["A man's dog, running -- fast!", "", 'The café (Paris) is "nice".', "two\nlines"])
    # brackets survive as -lrb-/-rrb-: pycocoevalcap's punctuation list has them upper-case, the tokens are lower
    assert out == ["a man 's dog running fast", "", "the café -lrb- paris -rrb- is nice", "two lines"]


# -- agreement with pycocoevalcap on the same inputs ---------------------------------------------------------
@pytest.fixture(scope="module")
def flickr_rows():
    df = load_flickr8k_expert(DATA / "flickr8k" / "ExpertAnnotations.txt")
    df = df.drop_duplicates(
        "candidate_id"
    )  # one row per (image, candidate) keeps pycocoevalcap's dicts small
    cands = [*df["candidate"], "It's a DOG -- running; fast!", "two  spaces , and (brackets)"]
    refs = [*df["references"], ["a dog is running", "A DOG RUNS."], ["Two spaces and brackets ."]]
    return cands, refs


def _pycoco(cands, refs):
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor as CocoMeteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tok = PTBTokenizer()
    gts = tok.tokenize({i: [{"caption": r} for r in rs] for i, rs in enumerate(refs)})
    res = tok.tokenize({i: [{"caption": c}] for i, c in enumerate(cands)})
    out = {}
    bleu_corpus, bleu = Bleu(4).compute_score(gts, res, verbose=0)
    for n in range(4):
        out[f"bleu{n + 1}"] = np.array(bleu[n])
        out[f"bleu{n + 1}_corpus"] = bleu_corpus[n]
    out["rouge"] = np.array(Rouge().compute_score(gts, res)[1])
    out["cider"] = np.array(Cider().compute_score(gts, res)[1])
    m = CocoMeteor()
    try:
        out["meteor_corpus"], meteor = m.compute_score(gts, res)
        out["meteor"] = np.array(meteor)
    finally:  # pycocoevalcap leaves its pipes open; close them so no ResourceWarning fires later
        m.meteor_p.kill()
        m.meteor_p.wait()
        for f in (m.meteor_p.stdin, m.meteor_p.stdout, m.meteor_p.stderr):
            f.close()
    return gts, res, out


def test_agrees_with_pycocoevalcap(flickr_rows, meteor):
    cands, refs = flickr_rows
    gts, res, expected = _pycoco(cands, refs)
    batch = CaptionBatch(candidates=cands, references=refs)
    ours_c, ours_r = batch.tokenized()
    assert ours_c == [res[i][0] for i in range(len(cands))]
    assert ours_r == [gts[i] for i in range(len(cands))]
    table, report = compute_metrics(TEXT, batch, metrics={"meteor": meteor})
    for name in TEXT:
        np.testing.assert_allclose(table[name].to_numpy(), expected[name], rtol=0, atol=1e-12, err_msg=name)
    # the corpus values pycocoevalcap reports: BLEU and METEOR aggregate statistics, not per-caption means
    for name in ("bleu1", "bleu2", "bleu3", "bleu4", "meteor"):
        assert report[name]["corpus"] == pytest.approx(expected[f"{name}_corpus"], abs=1e-12), name
    assert report["meteor"]["corpus"] != pytest.approx(float(expected["meteor"].mean()), abs=1e-6)


def test_duplicate_rows_score_like_pycocoevalcap_on_every_row(meteor):
    """Flickr8K-Expert has 3 rows per candidate; CIDEr's IDF counts each row as a document, like pycocoevalcap."""
    df = load_flickr8k_expert(DATA / "flickr8k" / "ExpertAnnotations.txt")
    cands, refs = list(df["candidate"]), list(df["references"])
    from pycocoevalcap.cider.cider import Cider

    batch = CaptionBatch(candidates=cands, references=refs)
    c, r = batch.tokenized()
    expected = Cider().compute_score({i: r[i] for i in range(len(c))}, {i: [c[i]] for i in range(len(c))})[1]
    table, _ = compute_metrics(["cider", "bleu4"], batch)
    np.testing.assert_allclose(table["cider"].to_numpy(), expected, atol=1e-12)
    assert np.allclose(table["bleu4"].to_numpy()[0::3], table["bleu4"].to_numpy()[1::3])


# -- METEOR process -----------------------------------------------------------------------------------------
def test_meteor_process_is_reused_and_validates(meteor):
    proc = shared_meteor()
    a = proc.score(["a dog runs"], [["a dog is running"]])
    b = proc.score(["a dog runs", "a dog runs"], [["a dog is running"], ["a dog is running"]])
    assert a[0] == b[0] == b[1] and proc.alive
    assert proc.score(["a ||| b"], [["a b"]])[0] > 0.9  # the field separator is stripped, not sent
    with pytest.raises(ValueError, match="at least one reference"):
        proc.score(["x"], [[]])


def test_meteor_oversize_caption_is_its_rows_error_and_the_others_are_scored(meteor):
    """A 1 MB caption (or reference) used to run the jar out of heap and stop every row: it is not sent to
    Java; its row is NaN with the reason, the other rows score as before, and the process stays alive."""
    from eval.metrics.meteor import MAX_CHARS

    huge = " ".join(["farm", "river", "green", "field"] * 50_000)  # about 1 MB
    batch = CaptionBatch(
        candidates=["a dog runs", huge, "a cat sits", "a dog runs"],
        references=[["a dog is running"], ["a farm"], ["a cat is sitting"], ["x " * MAX_CHARS]],
    )
    out = meteor.score(batch)
    alone = meteor.process.score(["a dog runs", "a cat sits"], [["a dog is running"], ["a cat is sitting"]])
    assert np.allclose(out.values[[0, 2]], alone) and np.isnan(out.values[[1, 3]]).all()
    errors = out.extra["meteor_error"]
    assert errors[0] is None and errors[2] is None
    assert errors[1].startswith(
        f"caption of {len(huge):,} characters is longer than METEOR's bound of 10,000"
    )
    assert errors[3].startswith("a reference of 19,999 characters is longer than METEOR's bound")
    assert out.info["failed_rows"] == 2 and meteor.process.alive


def test_meteor_owned_process_closes():
    m = build_metric("meteor")
    batch = CaptionBatch(candidates=["a cat"], references=[["a cat"]])
    assert m.score(batch).values[0] > 0.5
    proc = m.process
    m.close()
    assert not proc.alive


# -- SPICE: never downloads, says what is missing ------------------------------------------------------------
def test_spice_without_corenlp_names_the_jars_and_downloads_nothing(tmp_path, monkeypatch):
    from eval.metrics import spice
    from eval.metrics.spice import SpiceUnavailableError

    (tmp_path / "pycoco" / "spice" / "lib").mkdir(parents=True)
    monkeypatch.setattr(spice, "pycocoevalcap_dir", lambda: tmp_path / "pycoco")
    monkeypatch.delenv("RECONSCORE_CORENLP_DIR", raising=False)
    monkeypatch.setattr(urllib.request, "urlretrieve", lambda *a, **k: pytest.fail("SPICE tried to download"))
    with pytest.raises(SpiceUnavailableError) as err:
        build_metric("spice")
    msg = str(err.value)
    for needle in (
        "stanford-corenlp-3.6.0.jar",
        "stanford-corenlp-3.6.0-models.jar",
        "RECONSCORE_CORENLP_DIR",
    ):
        assert needle in msg
    assert str(tmp_path / "pycoco" / "spice" / "lib") in msg and "does not download" in msg


def test_spice_runs_one_jvm_on_distinct_pairs_and_reads_its_output(tmp_path, monkeypatch):
    import json

    from eval.metrics import spice

    for jar in spice.CORENLP_JARS:
        (tmp_path / jar).write_bytes(b"")
    monkeypatch.setenv("RECONSCORE_CORENLP_DIR", str(tmp_path))
    calls = []
    real_run = subprocess.run

    def fake_run(cmd, **kwargs):
        if "edu.anu.spice.SpiceScorer" not in cmd:  # the PTB tokenizer runs for real
            return real_run(cmd, **kwargs)
        calls.append(cmd)
        items = json.loads(Path(cmd[cmd.index("edu.anu.spice.SpiceScorer") + 1]).read_text())
        out = [
            {"image_id": it["image_id"], "scores": {"All": {"f": 0.25 * (k + 1) if k else "NaN"}}}
            for k, it in enumerate(items)
        ]
        Path(cmd[cmd.index("-out") + 1]).write_text(json.dumps(out))
        return subprocess.CompletedProcess(cmd, 0, b"", b"")

    monkeypatch.setattr(spice.subprocess, "run", fake_run)
    metric = build_metric("spice")
    batch = CaptionBatch(
        candidates=["a cat", "a dog", "a cat", "x"], references=[["a cat"], ["a dog"], ["a cat"], []]
    )
    values = metric.score(batch).values
    assert (
        len(calls) == 1
        and "-subset" in calls[0]
        and str(tmp_path / "*") in calls[0][calls[0].index("-cp") + 1]
    )
    assert math.isnan(values[0]) and math.isnan(values[2]) and values[1] == 0.5 and math.isnan(values[3])


def test_cider_with_a_fixed_idf_corpus_scores_each_row_as_in_the_whole_set():
    """`use_idf_corpus` (describe's selection) gives a row the CIDEr it gets when the whole corpus is scored at
    once by pycocoevalcap, whichever rows share its batch."""
    df = load_flickr8k_expert(DATA / "flickr8k" / "ExpertAnnotations.txt").iloc[:30]
    cands, refs = list(df["candidate"]), list(df["references"])
    whole = build_metric("cider").score(CaptionBatch(cands, refs)).values
    fixed = build_metric("cider")
    fixed.use_idf_corpus(refs)
    for part in (slice(0, 1), slice(5, 17), slice(0, 30)):
        got = fixed.score(CaptionBatch(cands[part], refs[part])).values
        np.testing.assert_allclose(got, whole[part], atol=1e-12)
    assert fixed.config()["idf_corpus"].startswith("the references of the 30 images")
