"""Each study on the smoke preset with tiny inputs: the table's shape, and values that agree with the runs."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eval.cli import main
from recon_score.presets import SMOKE_NOTE
from tests.smoke_cli import assert_restored, evaluate, smoke, two_systems


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def _study(argv: list[str], out: Path, table: str = "table.csv", **restore) -> pd.DataFrame:
    """Run a study, check that its deleted outputs come back byte for byte on a rerun, and read its table."""
    assert main(argv) == 0
    assert_restored(argv, out, **restore)
    return pd.read_csv(out / table, index_col=0)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """One describe run with a pool of 10 candidates for 2 images (with the sample's references)."""
    out = tmp_path_factory.mktemp("pool") / "d"
    assert (
        main(
            smoke(
                "describe",
                out,
                "--n",
                "10",
                "--limit",
                "2",
                "--t2i-batch-size",
                "10",
                "--eval-candidates",
                "all",
            )
        )
        == 0
    )
    return out


def test_n_sweep_reuses_one_pool(pool, tmp_path):
    out = tmp_path / "n"
    # whitespace around a --run label and folder is dropped, as for every KEY=VALUE option
    argv = ["study", "n-sweep", "--run", f"ucm={pool}", "--run", f" again = {pool} ", "--out", str(out)]
    df = _study(argv, out)  # held-out
    ins = pd.read_csv(out / "in_sample.csv", index_col=0)
    assert list(df.index) == [1, 2, 4, 6, 8, 10] and list(df.columns) == ["ucm", "again", "Total"]
    cands = _jsonl(pool / "candidates.jsonl")
    for n in (1, 4, 10):
        picks = []
        for i in ("UCM_1", "UCM_2"):
            mine = [c for c in cands if c["image_id"] == i and c["index"] < n]
            picks.append(max(mine, key=lambda c: (c["selection_score"], -c["index"])))
        assert ins.loc[n, "ucm"] == pytest.approx(np.mean([p["selection_score"] for p in picks]))
        assert df.loc[n, "ucm"] == pytest.approx(np.mean([p["recon_score"] for p in picks]))
    assert (ins["ucm"].diff().dropna() >= -1e-9).all()  # more candidates never lower the in-sample max
    caps = _jsonl(pool / "captions.jsonl")
    assert df.loc[10, "ucm"] == pytest.approx(np.mean([c["recon_score"] for c in caps]))
    assert ins.loc[10, "ucm"] == pytest.approx(np.mean([c["selection_score"] for c in caps]))
    run = json.loads((out / "run.json").read_text())
    assert run["study"] == "n-sweep" and run["curve"]["x"] == [1, 2, 4, 6, 8, 10]
    assert main(["study", "n-sweep", "--run", f"x={pool}", "--ns", "1,20", "--out", str(tmp_path / "m")]) == 1


def test_selection_study(pool, tmp_path):
    human = tmp_path / "human.jsonl"
    caps = _jsonl(pool / "captions.jsonl")
    human.write_text(
        "".join(json.dumps({"image_id": c["image_id"], "index": c["index"]}) + "\n" for c in caps)
    )
    out = tmp_path / "sel"
    argv = [
        "study",
        "selection",
        "--run",
        str(pool),
        "--selectors",
        "recon_score,bleu4",
        "--metrics",
        "recon_score,bleu1",
        "--preset",
        "smoke",
        "--human",
        str(human),
        "--out",
        str(out),
    ]
    df = _study(argv, out, "ratings.csv")
    assert list(df.index) == ["ReconScore", "BLEU-4"]
    # ReconScore picks what describe picked (by its selection render) and is rated by the held-out render
    assert df.loc["ReconScore", "ReconScore"] == pytest.approx(np.mean([c["recon_score"] for c in caps]))
    assert json.loads((out / "run.json").read_text())["details"]["selected_by_the_run"] == "recon_score"
    pref = pd.read_csv(out / "table.csv", index_col=0)  # the paper's Table 7 layout
    assert list(pref.index) == ["Preference Rate (%)"] and list(pref.columns) == ["ReconScore", "BLEU-4"]
    assert pref.loc["Preference Rate (%)", "ReconScore"] == 100.0  # humans chose what ReconScore chose
    # BLEU over the picks is corpus-level, as pycocoevalcap reports it (and as `evaluate` summarises)
    from pycocoevalcap.bleu.bleu import Bleu

    from eval.metrics.ptb import ptb_tokenize

    hyps = ptb_tokenize([c["caption"] for c in caps])
    refs = [ptb_tokenize(c["references"]) for c in caps]
    corpus, _ = Bleu(4).compute_score(
        {i: r for i, r in enumerate(refs)}, {i: [h] for i, h in enumerate(hyps)}, verbose=0
    )
    assert df.loc["ReconScore", "BLEU-1"] == pytest.approx(100 * corpus[0])
    assert json.loads((out / "run.json").read_text())["details"]["corpus_level"] == ["bleu1"]


def test_encoders_study(tmp_path, sample_dir):
    runs = two_systems(tmp_path, sample_dir)
    out = tmp_path / "enc"
    argv = ["study", "encoders", *runs, "--encoders", "smoke:dreamsim,lpips:alex", "--out", str(out)]
    table = _study(argv, out)
    tau = pd.read_csv(out / "rank_consistency.csv", index_col=0)
    assert table.shape == (2, 2) and tau.shape == (2, 2)
    for sys_name in ("terse", "rich"):  # the run's own encoder reproduces the run's scores
        mean = np.mean([r["recon_score"] for r in _jsonl(tmp_path / sys_name / "scores.jsonl")])
        assert table.loc[sys_name, "smoke:dreamsim"] == pytest.approx(mean, abs=1e-4)
    assert np.allclose(np.diag(tau.to_numpy()), 1.0) and abs(tau.iloc[0, 1]) == pytest.approx(1.0)


def test_t2i_study(tmp_path, sample_dir):
    caps = tmp_path / "c.jsonl"
    caps.write_text(
        "".join(
            json.dumps({"image": f"images/UCM_{i}.tif", "caption": f"farmland {i}"}) + "\n" for i in (1, 2)
        )
    )
    out = tmp_path / "t2i"
    argv = [
        "study",
        "t2i",
        "--captions",
        str(caps),
        "--images",
        str(sample_dir),
        "--presets",
        "smoke",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    df = _study(argv, out, volatile="I. T. (s)")  # a timing: never the same twice
    row = df.loc["smoke (smoke:z-image)"]
    assert row["M. T."] == 512 and row["truncated"] == 0
    # the table's ReconScore is the mean over the captions of a plain ReconScorer run of the same preset
    from recon_score.artifact_cache import ArtifactCache
    from recon_score.scorer import ReconScorer

    direct = ReconScorer.from_preset("smoke", device="cpu", batch_size=1, cache=ArtifactCache(enabled=False))
    res = direct.score([sample_dir / "images" / f"UCM_{i}.tif" for i in (1, 2)], ["farmland 1", "farmland 2"])
    assert row["ReconScore"] == pytest.approx(sum(r.recon_score for r in res) / 2, abs=1e-9)
    assert json.loads((out / "run.json").read_text())["meaningless"] is True


def test_t2i_inference_time_is_the_render_only(monkeypatch, sample_dir):
    """Table 9's I. T. is the T2I pipeline's time per image: a clock that advances 2 s per rendered image and
    100 s per encoder call must give exactly 2.0."""
    from eval.studies import robustness
    from recon_score import scorer as scorer_module
    from recon_score.images import load_image
    from recon_score.render import Renderer

    clock = {"now": 0.0}
    monkeypatch.setattr(scorer_module.time, "perf_counter", lambda: clock["now"])
    render, embed = Renderer.render, scorer_module.ReconScorer._embed

    def slow_render(self, requests):
        clock["now"] += 2.0 * len(requests)
        return render(self, requests)

    def slow_embed(self, *args, **kwargs):
        clock["now"] += 100.0
        return embed(self, *args, **kwargs)

    monkeypatch.setattr(Renderer, "render", slow_render)
    monkeypatch.setattr(scorer_module.ReconScorer, "_embed", slow_embed)
    image = load_image(sample_dir / "images" / "UCM_1.tif")
    df, _ = robustness.t2i_table(["smoke"], [(image, "a farm"), (image, "a road")], device="cpu")
    assert df["I. T. (s)"].iloc[0] == 2.0 and list(df.columns[:3]) == ["M. T.", "I. T. (s)", "ReconScore"]


def test_models_study(tmp_path, sample_dir):
    root = tmp_path / "ucm"
    (root / "images").mkdir(parents=True)
    for i in (1, 2):
        shutil.copy(sample_dir / "images" / f"UCM_{i}.tif", root / "images" / f"{i}.tif")
    (root / "test_caps.txt").write_text(
        "".join(f"a piece of farmland {k} .\n" for _ in (1, 2) for k in range(5))
    )
    (root / "test_filename.txt").write_text("".join(f"{i}.tif\n" for i in (1, 2) for _ in range(5)))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        '{"image_id": "1.tif", "caption": "a piece of farmland 0 ."}\n{"image_id": "2", "caption": "x"}\n'
    )
    b.write_text(
        '{"image": "1.tif", "caption": "roads"}\n{"image": "2.tif", "caption": "a piece of farmland 3 ."}\n'
    )
    out = tmp_path / "m"
    argv = [
        "study",
        "models",
        "--dataset",
        f"ucm=ucm-precomp:{root}",
        "--captions",
        f"A@ucm={a}",
        "--captions",
        f"B@ucm={b}",
        "--metrics",
        "recon_score,bleu1",
        "--preset",
        "smoke",
        "--out",
        str(out),
    ]
    df = _study(argv, out)
    assert list(df.index) == ["A", "B"] and list(df.columns) == ["Pub.", "ucm"]
    assert list(df["Pub."]) == ["-", "-"]
    ev = tmp_path / "ev"
    main(evaluate("ucm-precomp", root, a, "recon_score,bleu1", ev, "--preset", "smoke"))
    summary = pd.read_csv(ev / "summary.csv", index_col=0)
    assert df.loc["A", "ucm"] == pytest.approx(summary["ReconScore"].iloc[0])
    wide = pd.read_csv(out / "all_metrics.csv", index_col=0)
    assert wide.loc["A", "ucm BLEU-1"] == pytest.approx(summary["BLEU-1"].iloc[0])


def test_models_table_in_the_papers_layout():
    """Table 3: Method | Pub. | datasets, the models under a label row per paradigm (in first-seen order)."""
    from eval.studies.tables import models_tables

    long = pd.DataFrame(
        [
            {"model": m, "dataset": d, "metric": "recon_score", "value": v}
            for m, vals in (("GeoChat", (74.5, 70.8)), ("Qwen3-VL-8B", (83.5, 81.0)), ("VHM", (77.8, 76.9)))
            for d, v in zip(("sydney", "ucm"), vals)
        ]
    )
    tables = models_tables(
        long,
        ["GeoChat", "Qwen3-VL-8B", "VHM"],
        ["sydney", "ucm"],
        "recon_score",
        paradigm_of={"GeoChat": "Fine-tuned", "VHM": "Fine-tuned", "Qwen3-VL-8B": "Zero-shot"},
        pub={"GeoChat": "CVPR24", "VHM": "AAAI25"},
    )
    df, title = tables["table"]
    assert list(df.index) == ["Fine-tuned", "GeoChat", "VHM", "Zero-shot", "Qwen3-VL-8B"]
    assert list(df.columns) == ["Pub.", "sydney", "ucm"] and title.startswith("Table 3 layout")
    assert list(df["Pub."]) == ["", "CVPR24", "AAAI25", "", "-"]
    assert df.loc["VHM", "ucm"] == 76.9 and df.loc["Zero-shot", "ucm"] == ""


def _gen(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_paraphrase_study(tmp_path, sample_dir, capsys):
    src = "There is a piece of farmland ."
    para = _gen(
        tmp_path / "p.jsonl",
        [
            {
                "id": "a",
                "image": "images/UCM_1.tif",
                "source_caption": src,
                "kind": "paraphrase",
                "caption": "A field of crops is shown .",
                "error": None,
            }
        ],
    )
    pert = _gen(
        tmp_path / "q.jsonl",
        [
            {
                "id": "b",
                "image": "images/UCM_1.tif",
                "source_caption": src,
                "kind": "perturbed",
                "perturbation": "object",
                "caption": "There is a piece of forest .",
                "error": None,
            }
        ],
    )
    out = tmp_path / "t4"
    argv = [
        "study",
        "paraphrase",
        "--paraphrased",
        str(para),
        "--perturbed",
        str(pert),
        "--images",
        str(sample_dir),
        "--metrics",
        "bleu1,rouge,recon_score",
        "--preset",
        "smoke",
        "--out",
        str(out),
    ]
    df = _study(argv, out)
    assert list(df.columns) == ["Paraphrased", "Perturbed GT", "±Δ"] and list(df.index) == [
        "BLEU-1",
        "ROUGE",
        "ReconScore",
    ]
    assert np.allclose(df["±Δ"], df["Paraphrased"] - df["Perturbed GT"])
    assert df.loc["BLEU-1", "±Δ"] < 0  # n-gram overlap rewards the perturbed copy of the reference
    # its settings name no model, only `--preset smoke`: the study itself says it is meaningless
    assert json.loads((out / "run.json").read_text())["meaningless"] is True
    assert f"{SMOKE_NOTE}." in capsys.readouterr().err.splitlines()


def test_length_study(tmp_path, sample_dir):
    refs = ["There is a piece of farmland .", "It is a piece of cropland ."]
    rows = [
        {
            "id": f"x:{k}",
            "image": "images/UCM_1.tif",
            "source_caption": " ".join(refs),
            "kind": k,
            "references": refs,
            "caption": text,
            "error": None,
        }
        for k, text in (
            ("short", "There is a piece of farmland ."),
            ("medium", "There is a piece of farmland with crops planted in straight rows ."),
            ("long", "There is a large piece of farmland " + "with long straight rows " * 10 + "."),
        )
    ]
    out = tmp_path / "t5"
    argv = [
        "study",
        "length",
        "--generated",
        str(_gen(tmp_path / "g.jsonl", rows)),
        "--images",
        str(sample_dir),
        "--metrics",
        "bleu1,recon_score",
        "--preset",
        "smoke",
        "--out",
        str(out),
    ]
    df = _study(argv, out)
    assert list(df.columns) == ["Max Tokens", "S.", "M.", "L.", "σ"]
    b = df.loc["BLEU-1"]
    assert b["S."] > b["M."] > b["L."]  # reference overlap collapses with length
    assert b["σ"] == pytest.approx(np.std([b["S."], b["M."], b["L."]], ddof=1))
    assert str(df.loc["ReconScore", "Max Tokens"]) == "512" and df.loc["(average words)", "S."] == 7


def _not_selected_by_recon_score(pool: Path, dest: Path) -> Path:
    """The pool as a run selected by BLEU-4: no selection seeds, no selection render; the candidates keep the
    held-out `recon_score` (seed 42) of every candidate."""
    shutil.copytree(pool, dest)
    run = json.loads((dest / "run.json").read_text())
    run["selection"] = {
        "metric": "bleu4",
        "rule": "argmax, ties -> first candidate",
        "eval_candidates": "all",
        "eval_seed": 42,  # the seed of the candidates' held-out recon_score column
    }
    (dest / "run.json").write_text(json.dumps(run))
    rows = []
    for c in _jsonl(pool / "candidates.jsonl"):
        c["seed0"] = c.pop("selection_score")
        c["selection_score"] = float(c["index"])  # whatever BLEU-4 gave: not a ReconScore
        rows.append(c)
    (dest / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dest


def test_selection_study_never_rates_recon_score_picks_on_their_own_renders(pool, tmp_path):
    """Run selected by another metric: ReconScore picks by a selection-seed render (seed 0) and is rated by the
    evaluation render (seed 42) - not the mean of the per-image maxima of the seed-42 renders."""
    run = _not_selected_by_recon_score(pool, tmp_path / "bleu-run")
    out = tmp_path / "sel"
    args = ["study", "selection", "--run", str(run), "--selectors", "recon_score", "--metrics", "recon_score"]
    assert main([*args, "--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0
    df = pd.read_csv(out / "ratings.csv", index_col=0)
    cands = _jsonl(run / "candidates.jsonl")
    by_image: dict[str, list] = {}
    for c in cands:
        by_image.setdefault(c["image_id"], []).append(c)
    picks = [max(cs, key=lambda c: (c["seed0"], -c["index"])) for cs in by_image.values()]
    held_out = np.mean([p["recon_score"] for p in picks])
    in_sample = np.mean([max(c["recon_score"] for c in cs) for cs in by_image.values()])
    assert df.loc["ReconScore", "ReconScore"] == pytest.approx(held_out, abs=1e-4)
    assert held_out < in_sample  # what the study used to report
    details = json.loads((out / "run.json").read_text())["details"]
    assert details["recon_score_selection_seed"] == 0 and details["precomputed"] == ["recon_score"]
    bad = main([*args, "--preset", "smoke", "--selection-seed", "42", "--out", str(tmp_path / "bad")])
    assert bad == 1


def test_studies_refuse_the_runs_selection_seeds(pool, tmp_path, capsys):
    out = tmp_path / "sel"
    args = [
        "study",
        "selection",
        "--run",
        str(pool),
        "--selectors",
        "recon_score",
        "--metrics",
        "recon_score",
    ]
    assert main([*args, "--preset", "smoke", "--eval-seed", "0", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "evaluation seed(s) [0] are the run's selection seeds [0]" in err
    assert not (out / "ratings.csv").exists()


def test_a_pool_without_selection_scores_is_refused(pool, tmp_path):
    """No fallback for other column names (before 1.0 there is one vocabulary): the line is named."""
    old = tmp_path / "old"
    shutil.copytree(pool, old)
    rows = _jsonl(pool / "candidates.jsonl")
    rows[0]["reconscore"] = rows[0].pop("selection_score")
    (old / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["study", "n-sweep", "--run", f"ucm={old}", "--out", str(tmp_path / "sweep")]) == 1


def test_models_table_ci_cells_say_when_too_few_to_mean_much():
    """A CI under 5 degrees of freedom carries recon_score.seeds.ci_notes' words in its cell; a wide one none."""
    from eval.studies.tables import models_tables
    from recon_score.seeds import ci_notes, recon_score_ci

    long = pd.DataFrame(
        [{"model": m, "dataset": "ucm", "metric": "recon_score", "value": 80.0} for m in ("A", "B")]
    )
    rng = np.random.default_rng(0)
    few = recon_score_ci(np.array([[80.0, 81.0, 79.5], [82.0, 80.5, 81.5]]), ["x", "y"])
    wide = 80 + 3 * rng.normal(size=(40, 1)) + 0.01 * rng.normal(size=(40, 3))  # images dominate
    many = recon_score_ci(wide, [str(i) for i in range(40)])
    assert few["df"] < 5 and many["df"] >= 5 and ci_notes(many) == []
    tables = models_tables(
        long, ["A", "B"], ["ucm"], "recon_score", cis={("A", "ucm"): few, ("B", "ucm"): many}
    )
    cells = tables["recon_score_ci"][0]["ucm"]
    assert "too few to mean much" in cells["A"] and all(n in cells["A"] for n in ci_notes(few))
    assert cells["B"].endswith("]") and "(" not in cells["B"]


def test_selection_study_rates_every_pick_when_the_run_evaluated_only_its_own(pool, tmp_path):
    """`--eval-candidates selected` leaves `recon_score` null on the candidates describe did not pick: the
    column is computed for every pick (as if every candidate had it), never averaged over the picks that
    happen to be the run's own."""
    partial = tmp_path / "selected-only"
    shutil.copytree(pool, partial)
    rows = _jsonl(pool / "candidates.jsonl")
    for c in rows:
        if not c["selected"]:
            c["recon_score"] = c["recon_score_cosine"] = None
    (partial / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["study", "selection", "--selectors", "bleu4,recon_score", "--metrics", "recon_score"]
    tables = {}
    for name, run in (("all", pool), ("selected", partial)):
        out = tmp_path / f"sel-{name}"
        assert (
            main([*args, "--run", str(run), "--preset", "smoke", "--device", "cpu", "--out", str(out)]) == 0
        )
        tables[name] = pd.read_csv(out / "ratings.csv", index_col=0)
        details = json.loads((out / "run.json").read_text())["details"]
        assert details["precomputed"] == (["recon_score"] if name == "all" else [])
    for sel in ("BLEU-4", "ReconScore"):
        got, want = tables["selected"].loc[sel, "ReconScore"], tables["all"].loc[sel, "ReconScore"]
        assert got == pytest.approx(want, abs=1e-4)
