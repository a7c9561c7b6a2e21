"""Robustness-set generators: provenance on every row, perturbation kinds recorded, triplet pipeline, CLI with a
tiny text LLM."""

import json

import pytest

from eval.cli import main
from preference_data import generators as gen


def _sources(n=5):
    return [
        {
            "id": f"c{i}",
            "image": f"img{i // 2}.tif",
            "caption": f"two red cars are parked next to building {i}",
        }
        for i in range(n)
    ]


def _echo(prompts):
    return [(f"answer to: {p.splitlines()[-1]}", None) for p in prompts]


def test_paraphrase_rows_keep_provenance():
    reqs = gen.paraphrase_requests(_sources(2))
    rows = gen.run_requests(reqs, _echo)
    r = rows[0]
    assert r["id"] == "c0:paraphrase" and r["source_caption"] == "two red cars are parked next to building 0"
    assert r["kind"] == "paraphrase" and r["caption"].startswith("answer to: Caption: two red cars")
    assert "{caption}" not in r["instruction"] and r["source_caption"] in r["instruction"]
    assert r["instruction_file"].endswith("paraphrase.txt") and len(r["instruction_sha256"]) == 64


def test_perturbation_kinds_cycle_and_are_recorded():
    rows = gen.run_requests(gen.perturb_requests(_sources(5)), _echo)
    assert [r["perturbation"] for r in rows] == ["object", "count", "colour", "spatial", "object"]
    assert all(r["kind"] == "perturbed" for r in rows)
    every = gen.perturb_requests(_sources(2), kinds=("count", "spatial"), every_kind=True)
    assert [r.id for r in every] == [
        "c0:perturb-count",
        "c0:perturb-spatial",
        "c1:perturb-count",
        "c1:perturb-spatial",
    ]
    with pytest.raises(ValueError, match="unknown perturbation"):
        gen.perturb_requests(_sources(1), kinds=("texture",))


def test_triplets_then_length_rewrites():
    images = [
        {"id": "img0", "image": "img0.tif", "references": ["cars are parked at a parking lot", "a road"]}
    ]
    ext = gen.run_requests(
        gen.triplet_requests(images, n=10),
        lambda ps: [
            (
                "Here you go:\n<cars, are parked at, parking lot>\n- road | crosses | farmland\nnot a triplet",
                None,
            )
        ],
    )
    assert "up to 10 semantic triplets" in ext[0]["instruction"] and "a road" in ext[0]["instruction"]
    triplets = gen.parse_triplets(ext[0]["caption"])
    assert triplets == [("cars", "are parked at", "parking lot"), ("road", "crosses", "farmland")]
    ext[0]["triplets"] = triplets
    rows = gen.run_requests(gen.rewrite_requests(ext), _echo)
    assert [r["kind"] for r in rows] == ["short", "medium", "long"]
    assert all(r["triplets"] == [list(t) for t in triplets] for r in rows)
    assert "<cars, are parked at, parking lot>" in rows[2]["instruction"]


def test_failures_are_rows():
    reqs = gen.paraphrase_requests(_sources(3))
    rows = gen.run_requests(reqs, lambda ps: [(None, "HTTP 500")] * len(ps))
    assert [r["id"] for r in rows] == ["c0:paraphrase", "c1:paraphrase", "c2:paraphrase"]
    assert all(r["error"] == "HTTP 500" and r["caption"] is None for r in rows)


def test_instructions_are_files(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("Say it differently: {caption}")
    reqs = gen.paraphrase_requests(_sources(1), instruction=mine)
    assert reqs[0].prompt == "Say it differently: two red cars are parked next to building 0"
    with pytest.raises(FileNotFoundError, match="bundled: extract_triplets"):
        gen.load_instruction("nope")


def test_cli_with_a_tiny_text_llm(tmp_path, sample_dir, capsys):
    caps = tmp_path / "caps.jsonl"
    caps.write_text(
        "".join(
            json.dumps(
                {"id": f"s{i}", "image": "images/UCM_1.tif", "caption": f"There is a piece of farmland {i} ."}
            )
            + "\n"
            for i in range(3)
        )
    )
    out = tmp_path / "pert"
    args = [
        "generate",
        "perturb",
        "--captions",
        str(caps),
        "--model",
        "smoke:qwen3-text",
        "--device",
        "cpu",
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
    ]
    rc = main(args)
    rows = [json.loads(x) for x in (out / "generated.jsonl").read_text().splitlines()]
    assert rc in (0, 3) and len(rows) == 3
    assert [r["perturbation"] for r in rows] == ["object", "count", "colour"]
    assert all(r["source_caption"].startswith("There is a piece of farmland") for r in rows)
    run = json.loads((out / "run.json").read_text())
    assert run["model"]["name"] == "smoke:qwen3-text" and run["sampling"]["seed"] == 0
    assert "meaningless" in capsys.readouterr().err  # a synthetic model's run says so
    first = (out / "generated.jsonl").read_bytes()
    assert (
        main(args) == rc and (out / "generated.jsonl").read_bytes() == first
    )  # resumed: nothing regenerated
    out2 = tmp_path / "pert2"
    main([*args[:-1], str(out2)])
    assert (out2 / "generated.jsonl").read_bytes() == first  # same seed, same rows
