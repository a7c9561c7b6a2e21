"""Seed noise made visible: K seeds per caption, a cluster bootstrap CI over distinct images and shared seeds."""

import json

import numpy as np
import pytest

from eval.cli import main
from recon_score.seeds import ci_label, derive_seed, derive_seeds, recon_score_ci


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


def _frequencies(reps):
    values, counts = np.unique(np.round(reps, 9), return_counts=True)
    return dict(zip(values.tolist(), (counts / len(reps)).tolist()))


def test_ci_draws_images_not_rows():
    """Hand-computed: image A has captions scored 1 and 3, image B one caption scored 5. Drawing 2 images:
    AA (1/4) -> mean 2, AB or BA (1/2) -> (1+3+5)/3 = 3, BB (1/4) -> 5. A row bootstrap would draw 3 rows."""
    v = np.array([[1.0], [3.0], [5.0]])
    images = ["A", "A", "B"]
    ci = recon_score_ci(v, images, resamples=20000, level=0.9)
    assert (ci["images"], ci["seeds"], ci["captions"]) == (2, 1, 3)
    assert ci_label(ci) == "2 images x 1 seed (3 captions)"
    assert (ci["low"], ci["high"]) == (2.0, 5.0)  # 25% of the mass sits on each end
    assert ci["mean"] == 3.0
    reps = _replicates(v, images, 20000)
    freq = _frequencies(reps)
    assert set(freq) == {2.0, 3.0, 5.0}
    assert freq[2.0] == pytest.approx(0.25, abs=0.01) and freq[3.0] == pytest.approx(0.5, abs=0.01)


def test_ci_draws_seed_columns_jointly():
    """Hand-computed: images A (seeds: 1, 3) and B (5, 7), one caption each. The image draw gives a base of 1,
    3 or 5 (1/4, 1/2, 1/4) and the shared seed-column draw adds 0, 1 or 2 (1/4, 1/2, 1/4): the replicate is
    their sum, 1..7 with probabilities (1, 2, 3, 4, 3, 2, 1) / 16. Resampling seeds within each image
    independently (the old protocol) would also give odd quarters such as 1.5 or 2.5."""
    v = np.array([[1.0, 3.0], [5.0, 7.0]])
    reps = _replicates(v, ["A", "B"], 40000)
    freq = _frequencies(reps)
    assert set(freq) == {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0}
    for value, p in zip(range(1, 8), (1, 2, 3, 4, 3, 2, 1)):
        assert freq[float(value)] == pytest.approx(p / 16, abs=0.01)


def test_one_image_three_seeds_label():
    v = np.array([[60.0, 61.0, 62.0], [70.0, 71.0, 69.0], [80.0, 80.5, 79.0]])
    ci = recon_score_ci(v, ["tile.png"] * 3, resamples=200)
    assert ci_label(ci) == "1 image x 3 seeds (3 captions)"
    assert ci["low"] <= ci["mean"] <= ci["high"]


def _replicates(v, images, resamples, rng_seed=0):
    """The bootstrap replicates behind recon_score_ci, from the same protocol (recon_score.bootstrap)."""
    from recon_score.bootstrap import bootstrap_replicates

    keys = list(dict.fromkeys(images))
    rows = {k: [i for i, x in enumerate(images) if x == k] for k in keys}

    def stat(clusters, cols):  # written out: every drawn image's rows under every drawn column
        cells = [v[i, c] for g in clusters for i in rows[keys[g]] for c in cols]
        return sum(cells) / len(cells)

    return bootstrap_replicates(stat, len(keys), columns=v.shape[1], resamples=resamples, rng_seed=rng_seed)


def test_recon_score_ci_is_the_written_out_protocol():
    from recon_score.bootstrap import percentile_interval

    rng = np.random.default_rng(3)
    v = 70 + 5 * rng.standard_normal((9, 3))
    images = [0, 0, 1, 2, 2, 2, 3, 4, 4]
    ci = recon_score_ci(v, images, resamples=300, level=0.9, rng_seed=11)
    expected = percentile_interval(_replicates(v, images, 300, rng_seed=11), 0.9)
    assert (ci["low"], ci["high"]) == pytest.approx(expected, abs=1e-9)


def test_coverage_simulation():
    """Images with 1-3 captions each, K = 4 seeds shared by every image (a seed effect), an image effect and
    noise; 400 simulated data sets x 300 resamples. Measured: 91.5% of the nominal 95% intervals cover the true
    mean (K = 4 seed columns estimate the shared seed term from 4 values, so the percentile interval is a
    little short)."""
    rng = np.random.default_rng(2026)
    covered, sims, n, k = 0, 400, 40, 4
    for s in range(sims):
        per_image = rng.integers(1, 4, n)
        images = np.repeat(np.arange(n), per_image)
        image_effect = 2.0 * rng.standard_normal(n)[images]
        seed_effect = 0.4 * rng.standard_normal(k)
        v = 70.0 + image_effect[:, None] + seed_effect[None, :] + rng.standard_normal((len(images), k))
        ci = recon_score_ci(v, images.tolist(), resamples=300, rng_seed=s)
        covered += ci["low"] <= 70.0 <= ci["high"]
    coverage = covered / sims
    print(f"coverage {coverage:.3f}")
    assert 0.90 <= coverage <= 0.985


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
    from recon_score.bootstrap import percentile_interval

    v = np.array([r["recon_score_per_seed"] for r in rows])
    lo, hi = percentile_interval(_replicates(v, [r["image"] for r in rows], 2000), 0.95)
    assert ci["low"] == pytest.approx(lo, abs=1e-9) and ci["high"] == pytest.approx(hi, abs=1e-9)
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
    assert "bootstrap CI over 3 images x 2 seeds (3 captions)" in capsys.readouterr().out
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
    assert "1 image x 3 seeds (3 captions)" in capsys.readouterr().out
    ci = json.loads((out / "run.json").read_text())["seed_noise"]["recon_score_ci"]
    assert (ci["images"], ci["seeds"], ci["captions"]) == (1, 3, 3)
