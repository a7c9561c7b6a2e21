"""Seed noise made visible: K seeds per caption; the CI of the mean: a t interval over distinct images (one
seed), a two-way random-effects t interval over images x shared seeds (K > 1), clipped to the score's range and
said in words when it rests on too few degrees of freedom."""

import json
import re
from functools import partial

import numpy as np
import pytest
from scipy import stats

from eval.cli import main
from eval.metrics import METRICS
from recon_score.seeds import (
    RECON_SCORE_RANGE,
    ci_heading,
    ci_label,
    ci_line,
    ci_notes,
    crossed_variance,
    derive_seed,
    derive_seeds,
    format_ci,
    recon_score_ci,
)


def _jsonl(p):
    return [json.loads(x) for x in p.read_text().splitlines()]


def test_derive_seeds():
    assert derive_seeds(42, 1) == [42]  # K = 1: the paper's seed alone
    five = derive_seeds(42, 5)
    assert five[0] == 42 and len(set(five)) == 5 and five == derive_seeds(42, 5)
    assert derive_seeds(42, 3) == five[:3]  # growing K keeps the earlier seeds
    assert all(0 <= s < 2**31 for s in five)
    assert 42 not in derive_seeds(0, 20, exclude={42})
    with pytest.raises(ValueError):
        derive_seeds(42, 2, exclude={42})


def test_derive_seed_is_the_one_hash():
    import hashlib

    h = hashlib.sha256(b"7:abc").hexdigest()
    assert derive_seed(7, "abc") == int(h[:15], 16)  # 60 bits: the describer's sampling seeds
    h = hashlib.sha256(b"reconscore-seed:42:1").digest()
    assert derive_seeds(42, 2)[1] == int.from_bytes(h[:4], "big") & 0x7FFF_FFFF  # 31 bits: T2I seeds


def test_one_seed_one_caption_per_image_is_scipys_t_interval():
    """One caption per image: the textbook t interval over the image scores (scipy's one-sample t)."""
    rng = np.random.default_rng(3)
    v = 70 + 5 * rng.standard_normal(9)
    ci = recon_score_ci(v[:, None], list("abcdefghi"), level=0.9)
    ref = stats.ttest_1samp(v, 0.0).confidence_interval(0.9)
    assert (ci["low"], ci["high"]) == pytest.approx((ref.low, ref.high))
    assert ci["df"] == pytest.approx(8) and ci["se"] == pytest.approx(stats.sem(v))
    assert ci_heading(ci) == "90% t CI over 9 images x 1 seed (9 captions)" and not ci["clipped"]


def test_one_seed_unequal_captions_hand_worked():
    """Image A has captions scored 1 and 3, B one scored 5, C one scored 6: w = (1/2, 1/4, 1/4), image means
    (2, 5, 6), mean 15/4. sum w^2 r^2 = (1/4)(49/16) + (1/16)(25/16) + (1/16)(81/16) = 151/128; s2 = 3/8,
    s3 = 5/32, s4 = 9/128, so var = 151/128 * s2 / (s2 - 2 s3 + s2^2) = 151/128 * 24/13 = 453/208 and
    df = (G - 1) s2^2 / (G s4) = 2 (9/64) / (27/128) = 4/3. Three captions of A and B are two images, not
    three rows: a row-wise interval would have df 3."""
    ci = recon_score_ci(np.array([[1.0], [3.0], [5.0], [6.0]]), ["A", "A", "B", "C"], value_range=None)
    assert (ci["images"], ci["seeds"], ci["captions"]) == (3, 1, 4)
    assert ci_label(ci) == "3 images x 1 seed (4 captions)"
    assert ci["mean"] == 3.75 and ci["variance"] == {"images": pytest.approx(453 / 208)}
    assert ci["df"] == pytest.approx(4 / 3)
    half = stats.t.ppf(0.975, 4 / 3) * np.sqrt(453 / 208)
    assert (ci["low"], ci["high"]) == pytest.approx((3.75 - half, 3.75 + half))
    assert ci["low"] < 0 and ci["range"] is None  # unclipped on request; by default clipped to 0-100
    assert recon_score_ci(np.array([[1.0], [3.0], [5.0], [6.0]]), ["A", "A", "B", "C"])["low"] == 0.0


def test_one_image_three_seeds_label():
    v = np.array([[60.0, 61.0, 62.0], [70.0, 71.0, 69.0], [80.0, 80.5, 79.0]])
    ci = recon_score_ci(v, ["tile.png"] * 3)
    assert ci_label(ci) == "1 image x 3 seeds (3 captions)"
    assert ci["low"] <= ci["mean"] <= ci["high"]


def test_the_range_is_reconscores():
    from recon_score.scorer import recon_score_from_cosine

    assert (recon_score_from_cosine(-1.0), recon_score_from_cosine(1.0)) == RECON_SCORE_RANGE


def test_a_ci_past_the_range_is_clipped_and_few_degrees_of_freedom_said_in_words():
    """2 images x 3 seeds near the top of the scale (the example of docs/seeds.md): the t interval reaches past
    100, which no mean ReconScore can; the line says it is clipped and rests on too few degrees of freedom."""
    v = np.array([[99.0, 97.0, 99.6], [99.9, 96.5, 99.1]])
    ci = recon_score_ci(v, ["a", "b"])
    raw = recon_score_ci(v, ["a", "b"], value_range=None)
    assert raw["high"] > 100 and ci["high"] == 100.0 and ci["low"] == raw["low"]
    assert ci["clipped"] and ci["range"] == [0.0, 100.0] and not raw["clipped"]
    assert ci_line(ci) == (
        "ReconScore mean [95% two-way random-effects t CI over 2 images x 3 seeds (2 captions)]: "
        "98.52 [94.22, 100.00] (clipped to the score's range 0-100; too few to mean much: 1.7 degrees of "
        "freedom, fewer than 5, so add images or seeds)"
    )
    cosine = recon_score_ci(v / 100 - 0.5, ["a", "b"], value_range=(-1.0, 1.0))  # another metric's range
    assert cosine["high"] <= 1.0
    many = recon_score_ci(70 + np.arange(30.0)[:, None] % 7, list(range(30)))
    assert ci_notes(many) == [] and ci_line(many).endswith("]")  # 29 degrees of freedom: nothing to say


def test_crossed_variance_is_the_textbook_two_way_anova():
    """Balanced (one caption per image): the variance of the grand mean of a two-way random-effects table is
    (MS_images + MS_seeds - MS_residual) / (G K), written out here with loops, Satterthwaite's df with it."""
    rng = np.random.default_rng(5)
    g, k = 7, 3
    z = 70 + 2 * rng.standard_normal((g, 1)) + 3 * rng.standard_normal((1, k)) + rng.standard_normal((g, k))
    grand = sum(z[i, j] for i in range(g) for j in range(k)) / (g * k)
    rows = [sum(z[i]) / k for i in range(g)]
    cols = [sum(z[:, j]) / g for j in range(k)]
    ms_a = k * sum((r - grand) ** 2 for r in rows) / (g - 1)
    ms_b = g * sum((c - grand) ** 2 for c in cols) / (k - 1)
    ms_e = sum((z[i, j] - rows[i] - cols[j] + grand) ** 2 for i in range(g) for j in range(k)) / (
        (g - 1) * (k - 1)
    )
    parts_ = [ms_a / (g * k), ms_b / (g * k), ms_e / (g * k)]
    want = parts_[0] + parts_[1] - parts_[2]
    want_df = want**2 / (
        parts_[0] ** 2 / (g - 1) + parts_[1] ** 2 / (k - 1) + parts_[2] ** 2 / ((g - 1) * (k - 1))
    )
    mean, var, parts = crossed_variance(z, np.full(g, 1 / g))
    assert bool(parts["seed_kept"])  # the seed effect (sd 3) is plain here
    assert float(mean) == pytest.approx(grand) and float(var) == pytest.approx(want)
    assert float(parts["df"]) == pytest.approx(want_df)
    ci = recon_score_ci(z, list(range(g)))
    from scipy import stats

    half = stats.t.ppf(0.975, want_df) * np.sqrt(want)
    assert (ci["low"], ci["high"]) == pytest.approx((grand - half, grand + half))
    assert ci_heading(ci) == "95% two-way random-effects t CI over 7 images x 3 seeds (7 captions)"


def test_no_seed_effect_drops_the_seed_component():
    """Identical seed columns up to noise far below the residual: the F test pools the seed term away and the
    variance is the image term alone (the residual is not counted twice)."""
    rng = np.random.default_rng(0)
    z = 70 + rng.standard_normal((30, 4))
    z -= z.mean(0) - z.mean()  # column means all equal: no seed spread at all
    _, var, parts = crossed_variance(z, np.full(30, 1 / 30))
    assert not bool(parts["seed_kept"]) and float(var) == pytest.approx(float(parts["images"]))


def test_ci_weights_images_by_their_captions():
    """Unbalanced captions: the interval's centre is the mean over every (caption, seed) cell, and the
    variance function sees the image-by-seed means weighted by caption counts."""
    rng = np.random.default_rng(1)
    images = [0] * 5 + [1] + [2] * 2 + [3] * 3
    v = 60 + rng.standard_normal((len(images), 3)) + np.array(images)[:, None]
    ci = recon_score_ci(v, images)
    z = np.array([v[np.array(images) == i].mean(0) for i in range(4)])
    mean, var, parts = crossed_variance(z, np.array([5, 1, 2, 3]) / 11)
    assert ci["mean"] == pytest.approx(v.mean()) == pytest.approx(float(mean))
    assert ci["se"] == pytest.approx(np.sqrt(float(var))) and ci["df"] == pytest.approx(float(parts["df"]))


def _coverage_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "seed_ci_coverage.py"
    spec = importlib.util.spec_from_file_location("seed_ci_coverage", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_coverage_tables_are_the_scripts_and_hold():
    """docs/seeds.md's coverage tables are the output of benchmarks/seed_ci_coverage.py (5 designs, at their
    K and at one seed, 4000 data sets each, fixed rng seeds), not typed by hand, and every coverage of the
    project's interval in them is within 93-97 %."""
    mod = _coverage_module()
    found = mod.results(4000)
    page = mod.DOCS.read_text(encoding="utf-8")
    assert f"{mod.MARK[0]}\n{mod.table(found, 4000)}\n{mod.MARK[1]}" in page
    assert mod.outside_band(found) == []


def test_the_coverage_script_measures_recon_score_ci():
    """The benchmark's vectorised intervals are recon_score_ci's, data set by data set, at K and at one seed;
    its 'before' column is the percentile cluster bootstrap of recon_score.bootstrap."""
    from recon_score.bootstrap import bootstrap_ci

    mod = _coverage_module()
    for design in mod.designs().values():
        counts = np.asarray(design["counts"])
        images = np.repeat(np.arange(len(counts)), counts).tolist()
        for k in (design["k"], 1):
            v, _ = mod.simulate(design, 3, k, rng_seed=7)
            mean, low, high = mod.intervals(design, v)
            for i in range(3):
                ci = recon_score_ci(v[i], images)
                assert (ci["mean"], ci["low"], ci["high"]) == pytest.approx((mean[i], low[i], high[i]))
        b_low, b_high = mod.percentile_bootstrap(design, v)
        sums = np.bincount(images, v[0, :, 0])
        stat = partial(_drawn_mean, sums, counts)
        assert bootstrap_ci(stat, len(counts)) == pytest.approx((b_low[0], b_high[0]))


def _drawn_mean(sums, counts, drawn):
    return float(sums[drawn].sum() / counts[drawn].sum())


def test_recon_score_ci_rejects_gaps():
    with pytest.raises(ValueError):
        recon_score_ci(np.array([[1.0, np.nan]]), ["a"])
    with pytest.raises(ValueError, match="image keys"):
        recon_score_ci(np.array([[1.0], [2.0]]), ["a"])


@pytest.fixture(scope="module")
def score_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds")
    common = ["score", "--preset", "smoke", "--limit", "4", "--device", "cpu"]
    runs = {}
    for name, extra in (("plain", []), ("k1", ["--seeds", "1"]), ("k3", ["--seeds", "3"])):
        assert main([*common, *extra, "--out", str(root / name)]) == 0
        runs[name] = root / name
    return runs


def test_one_seed_output_unchanged(score_runs):
    plain, k1 = _jsonl(score_runs["plain"] / "scores.jsonl"), _jsonl(score_runs["k1"] / "scores.jsonl")
    assert plain == k1 and set(plain[0]) == set(k1[0])
    r_plain = json.loads((score_runs["plain"] / "run.json").read_text())
    r_k1 = json.loads((score_runs["k1"] / "run.json").read_text())
    assert r_plain["summary"] == r_k1["summary"] and r_plain["fingerprint"] == r_k1["fingerprint"]
    assert "seed_noise" not in r_k1


def test_k_seeds_rows_and_ci(score_runs):
    plain = _jsonl(score_runs["plain"] / "scores.jsonl")
    rows = _jsonl(score_runs["k3"] / "scores.jsonl")
    seeds = derive_seeds(42, 3)
    for one, row in zip(plain, rows):
        per = row["recon_score_per_seed"]
        assert row["seeds"] == seeds and len(per) == 3
        assert per[0] == pytest.approx(one["recon_score"], abs=1e-6)  # seed 42 = the one-seed render
        assert row["recon_score"] == pytest.approx(np.mean(per))
        assert row["recon_score_std"] == pytest.approx(np.std(per, ddof=1))
    run = json.loads((score_runs["k3"] / "run.json").read_text())
    ci = run["seed_noise"]["recon_score_ci"]
    from scipy import stats

    v = np.array([r["recon_score_per_seed"] for r in rows])
    cols = v.mean(0)  # one image: the interval is over its K seed means alone (t with K - 1 df)
    half = stats.t.ppf(0.975, 2) * cols.std(ddof=1) / np.sqrt(3)
    assert ci["low"] == pytest.approx(v.mean() - half) and ci["high"] == pytest.approx(v.mean() + half)
    assert ci["df"] == 2 and ci["variance"]["images"] == 0
    assert ci_label(ci) == "1 image x 3 seeds (4 captions)"  # the sample's first four rows: UCM_1's captions
    assert ci["mean"] == pytest.approx(run["summary"]["recon_score_mean"])
    assert run["seed_noise"]["seeds"] == seeds


def test_evaluate_and_study_models_print_the_ci(tmp_path, sample_dir, capsys):
    import shutil

    import pandas as pd

    root = tmp_path / "ucm"
    (root / "images").mkdir(parents=True)
    images = []
    for i in (1, 2, 3):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
        images.append({"filename": f"{i}.tif", "split": "test", "sentences": [{"raw": "a farm ."}]})
    (root / "dataset_ucm.json").write_text(json.dumps({"images": images, "dataset": "ucm"}))
    caps = tmp_path / "m" / "captions.jsonl"
    caps.parent.mkdir()
    caps.write_text(
        "".join(json.dumps({"image_id": f"{i}.tif", "caption": f"field {i}"}) + "\n" for i in (1, 2, 3))
    )
    ds = ["--dataset", "ucm-captions", "--root", str(root)]
    common = ["--preset", "smoke", "--device", "cpu", "--seeds", "2"]
    out = tmp_path / "eval"
    assert (
        main(
            ["evaluate", *ds, "--captions", str(caps), "--metrics", "recon_score", *common, "--out", str(out)]
        )
        == 0
    )
    assert "two-way random-effects t CI over 3 images x 2 seeds (3 captions)" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    ci = run["metric_reports"]["recon_score"]["ci"]
    assert ci["range"] == list(METRICS["recon_score"].value_range)  # clipped to the metric entry's range
    per = _jsonl(out / "per_image.jsonl")
    assert ci["mean"] == pytest.approx(np.mean([r["recon_score"] for r in per]))  # the K-seed means
    assert all(r["recon_score_std"] is not None for r in per)
    st = tmp_path / "st"
    args = ["study", "models", "--dataset", f"ucm=ucm-captions:{root}", "--captions", f"m@ucm={caps}"]
    assert main([*args, "--metrics", "recon_score", *common, "--out", str(st)]) == 0
    table = pd.read_csv(st / "recon_score_ci.csv", index_col=0)
    assert table.loc["m", "ucm"].startswith(f"{ci['mean']:.2f} [")


def test_score_seeds_on_captions_of_one_image_counts_one_image(tmp_path, capsys):
    """The bundled sample's first three rows are three captions of UCM_1."""
    out = tmp_path / "run"
    args = [
        "score",
        "--preset",
        "smoke",
        "--device",
        "cpu",
        "--limit",
        "3",
        "--seeds",
        "3",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "1 image x 3 seeds (3 captions)" in printed
    assert "(1 image: the CI is over its seeds only, not over images; too few to mean much" in printed
    assert "mean ± std over 3 captions" in printed
    assert not re.search(r"± 0\.00(?!\d)", printed)  # the three captions' std is small, not zero
    ci = json.loads((out / "run.json").read_text())["seed_noise"]["recon_score_ci"]
    assert (ci["images"], ci["seeds"], ci["captions"]) == (1, 3, 3)
    ci_line = next(line for line in printed.splitlines() if "1 image x 3 seeds" in line)
    assert main(args) == 0  # already complete: the same CI line, read from the journal
    again = capsys.readouterr().out
    assert "already complete" in again and ci_line in again.splitlines()


def test_ci_line_never_shows_a_spread_of_one_value():
    ci = recon_score_ci(np.array([[80.0], [81.0]]), ["a", "b"])  # 2 images: a t interval on 1 df, said so
    assert (
        f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}] (too few to mean much: 1.0 degrees"
        in ci_line(ci)
    )
    one = recon_score_ci(np.array([[80.0]]), ["a"])  # 1 image x 1 seed: a value, no interval
    assert (
        ci_line(one)
        == "ReconScore mean over 1 image x 1 seed (1 caption): 80.00 (1 image, 1 seed: no interval)"
    )
    assert (one["low"], one["high"]) == (None, None) and format_ci(one) == "80.00 (no interval)"
    seeds = recon_score_ci(np.array([[80.0, 81.0, 79.0]]), ["a"])
    assert "(1 image: the CI is over its seeds only, not over images; too few to mean much" in ci_line(seeds)
