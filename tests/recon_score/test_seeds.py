"""Seed noise made visible (issue 11, item 10): K seeds per caption, a bootstrap CI over images and seeds."""

import json

import numpy as np
import pytest

from eval.cli import main
from recon_score.seeds import bootstrap_ci, derive_seeds


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


def _reference_bootstrap(v, resamples, level, seed):
    """The documented protocol, written out with loops."""
    n, k = v.shape
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(resamples):
        rows = rng.integers(0, n, n)
        cols = rng.integers(0, k, (n, k))
        total = 0.0
        for a in range(n):
            for b in range(k):
                total += v[rows[a], cols[a, b]]
        stats.append(total / (n * k))
    return np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])


def test_bootstrap_ci_matches_a_direct_resampling():
    rng = np.random.default_rng(3)
    v = 70 + 5 * rng.standard_normal((12, 4)) + rng.standard_normal((12, 1)) * 3
    ci = bootstrap_ci(v, resamples=400, level=0.9, rng_seed=11)
    lo, hi = _reference_bootstrap(v, 400, 0.9, 11)
    assert ci["low"] == pytest.approx(lo, abs=1e-9) and ci["high"] == pytest.approx(hi, abs=1e-9)
    assert ci["mean"] == pytest.approx(v.mean()) and ci["low"] < ci["mean"] < ci["high"]
    assert (ci["images"], ci["seeds"]) == (12, 4)


def test_bootstrap_ci_one_seed_is_the_percentile_bootstrap():
    """K = 1: the ordinary percentile bootstrap of the mean; scipy's (another RNG stream) agrees closely."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(5)
    x = 60 + 8 * rng.standard_normal(60)
    ours = bootstrap_ci(x, resamples=20000)
    ref = bootstrap(
        (x,), np.mean, n_resamples=20000, method="percentile", confidence_level=0.95, random_state=1
    ).confidence_interval
    se = x.std(ddof=1) / np.sqrt(len(x))
    assert ours["low"] == pytest.approx(ref.low, abs=0.05 * se)
    assert ours["high"] == pytest.approx(ref.high, abs=0.05 * se)


def test_bootstrap_ci_rejects_gaps():
    with pytest.raises(ValueError):
        bootstrap_ci(np.array([[1.0, np.nan]]))


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
    lo, hi = _reference_bootstrap(np.array([r["recon_score_per_seed"] for r in rows]), 2000, 0.95, 0)
    assert ci["low"] == pytest.approx(lo, abs=1e-9) and ci["high"] == pytest.approx(hi, abs=1e-9)
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
    assert "bootstrap CI over 3 images x 2 seeds" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    ci = run["metric_reports"]["recon_score"]["ci"]
    per = _jsonl(out / "per_image.jsonl")
    assert ci["mean"] == pytest.approx(np.mean([r["recon_score"] for r in per]))  # the K-seed means
    assert all(r["recon_score_std"] is not None for r in per)
    st = tmp_path / "st"
    args = ["study", "models", "--dataset", f"ucm=ucm-captions:{root}", "--captions", f"m@ucm={caps}"]
    assert main([*args, "--metrics", "recon_score", *common, "--out", str(st)]) == 0
    table = pd.read_csv(st / "recon_score_ci.csv", index_col=0)
    assert table.loc["m", "ucm"].startswith(f"{ci['mean']:.2f} [")
