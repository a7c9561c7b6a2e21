"""The `reconscore` command line: help, version, listings, honest stubs."""

import json
import subprocess
import sys

import pytest

from eval.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    names = (
        "score",
        "describe",
        "pairs",
        "correlate",
        "retrieve",
        "retrieve-eval",
        "report",
        "evaluate",
        "study",
        "generate",
        "models",
        "presets",
        "metrics",
        "annotate",
    )
    for name in names:
        assert name in out
    assert set(SUBCOMMANDS) == set(names)


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "reconscore, version 0.1.0" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_subcommand_has_real_help(name, capsys):
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"reconscore {name}" in out and ("Options" in out or "Commands" in out)


def test_score_help_documents_the_contract(capsys):
    main(["score", "--help"])
    out = capsys.readouterr().out
    for needle in (
        "--captions",
        "--images",
        "--preset",
        "--out",
        "--device",
        "--batch-size",
        "scores.jsonl",
        "run.json",
        "resume",
        "Exit status",
    ):
        assert needle in out


def test_presets(capsys):
    assert main(["presets", "list"]) == 0
    out = capsys.readouterr().out
    assert "paper" in out and "smoke" in out and "fast" in out
    assert main(["presets", "show", "paper", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["t2i_model"] == "Tongyi-MAI/Z-Image" and shown["steps"] == 28 and shown["seed"] == 42
    assert main(["presets", "show", "papr"]) == 2
    assert "did you mean 'paper'" in capsys.readouterr().err


def test_models_list_shows_every_family(capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    for needle in (
        "dreamsim:ensemble",
        "open_clip:ViT-L-14/openai",
        "hf:",
        "lpips:alex",
        "smoke:z-image",
        "Tongyi-MAI/Z-Image",
    ):
        assert needle in out
    assert main(["models", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["family"] for r in data["encoders"]} == {"dreamsim", "open_clip", "hf", "lpips"}


def test_models_check(capsys, tmp_path):
    assert main(["models", "check", "lpips:vgg"]) == 0
    assert "available" in capsys.readouterr().out
    assert main(["models", "check", "dreamsim:ensemble", "--weights-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "NOT available" in out and "dino_vitb16_pretrain.pth" in out
    assert main(["models", "check", "Tongyi-MAI/Z-Image"]) == 1
    assert "HF_HUB_OFFLINE" in capsys.readouterr().out
    assert main(["models", "check", "smoke:z-image"]) == 0


def test_console_script_and_module_agree():
    r = subprocess.run([sys.executable, "-m", "eval", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "score" in r.stdout


def test_help_does_not_import_torch():
    helps = [["--help"], ["score", "--help"], ["describe", "--help"], ["retrieve", "--help"]]
    helps += [
        ["retrieve-eval", "--help"],
        ["correlate", "--help"],
        ["evaluate", "--help"],
        ["presets", "list"],
    ]
    code = (
        f"import sys; from eval.cli import main; [main(a) for a in {helps!r}]; "
        "print('torch' in sys.modules, 'diffusers' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip().splitlines()[-1] == "False False"


def _params(*path: str) -> dict:
    import click

    from eval.cli import cli

    cmd, ctx = cli, click.Context(cli)
    for name in path:
        cmd = cmd.get_command(ctx, name)
    return {p.name: p for p in cmd.params}


def test_choices_and_defaults_come_from_the_registries(capsys):
    """The CLI restates no registry: presets, benchmarks, methods, protocol choices, metric names, formats and the
    CLIPScore encoder are the code's own."""
    from describer.presets import DESCRIBER_PRESETS
    from eval.cli.generate import KINDS
    from eval.generate import KINDS as GENERATORS
    from eval.metrics import list_metrics
    from eval.metrics.clip import DEFAULT_ENCODER, LONG_TEXT_MODES
    from recon_score.presets import PRESETS
    from retrieval import choices
    from retrieval.datasets import BENCHMARKS
    from retrieval.methods import METHODS

    for path in (["score"], ["evaluate"], ["correlate"], ["metrics", "add"]):
        assert list(_params(*path)["preset"].type.choices) == list(PRESETS), path
    assert list(_params("describe")["preset"].type.choices) == list(DESCRIBER_PRESETS)
    assert list(_params("describe")["recon_preset"].type.choices) == list(PRESETS)
    assert list(_params("retrieve")["benchmark"].type.choices) == list(BENCHMARKS)
    assert list(_params("retrieve-eval")["method"].type.choices) == list(METHODS)
    assert tuple(_params("retrieve-eval")["ap"].type.choices) == choices.AP_VARIANTS
    assert tuple(_params("retrieve")["index_kind"].type.choices) == choices.INDEX_KINDS
    for path in (["retrieve"], ["retrieve-eval"]):
        p = _params(*path)
        assert tuple(p["ties"].type.choices) == choices.TIES
        assert tuple(p["empty_positives"].type.choices) == choices.EMPTY_ACTIONS
        assert tuple(p["group_mean"].type.choices) == choices.GROUP_MEANS
    assert KINDS == GENERATORS
    for path in (["evaluate"], ["correlate"], ["metrics", "add"]):
        p = _params(*path)
        assert (
            tuple(p["long_text"].type.choices) == LONG_TEXT_MODES and p["encoder"].default == DEFAULT_ENCODER
        )
        assert all(m.name in p["metrics"].help for m in list_metrics()), path
    assert main(["study", "selection", "--help"]) == 0
    assert "[truncate|sliding-window]" in " ".join(capsys.readouterr().out.split())


def test_override_flags_are_the_preset_fields(tmp_path):
    """Every preset field a user may change has its flag (a field added to the dataclass gets one), and a flag's
    value reaches run.json parsed as the preset would hold it."""
    import dataclasses

    from describer.presets import DescriberPreset
    from recon_score.presets import ReconPreset
    from recon_score.prompts import PLAIN_TEMPLATE

    for cls, path in ((ReconPreset, "score"), (DescriberPreset, "describe")):
        fields = {f.name for f in dataclasses.fields(cls)} - set(cls.FIXED)
        assert fields == set(cls.OVERRIDES) and fields <= set(_params(path)), path
    out = tmp_path / "o"
    argv = ["score", "--preset", "smoke", "--limit", "1", "--steps", "2", "--prompt-template", "plain"]
    assert main([*argv, "--no-vae-tiling", "--max-side", "64", "--out", str(out)]) == 0
    preset = json.loads((out / "run.json").read_text())["config"]["preset"]
    assert (preset["steps"], preset["vae_tiling"], preset["max_side"]) == (2, False, 64)
    assert preset["prompt_template"] == PLAIN_TEMPLATE


def test_an_unknown_name_is_a_usage_error(capsys):
    """docs/cli.md: a bad value on the command line is exit 2, and says what is allowed; a mistyped subcommand
    gets the closest name, as a mistyped option does."""
    assert main(["score", "--preset", "papr", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "'papr' is not one of" in err and "'paper'" in err
    assert main(["evaluate", "--dataset", "ucm", "--root", ".", "--captions", "x", "--out", "x"]) == 2
    assert "'ucm' is not one of" in capsys.readouterr().err
    assert main(["scor", "--preset", "smoke"]) == 2
    assert "No such command 'scor'. Did you mean 'score'?" in capsys.readouterr().err
    assert main(["presets", "lst"]) == 2
    assert "Did you mean 'list'?" in capsys.readouterr().err


RETRIEVE = ["retrieve", "--benchmark", "xview2-cir", "--root", "TMP", "--encoder", "smoke:open-clip"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            [*RETRIEVE, "--option", "phrasing=alt1", "--option", " phrasing = alt2"],
            "error: --option: key 'phrasing' given twice ('phrasing=alt1' and ' phrasing = alt2'); give each key once",
        ),
        (
            [*RETRIEVE, "--checkpoint", "magiclens= "],
            "error: --checkpoint: expected KEY=VALUE, got 'magiclens= ' (an empty VALUE)",
        ),
        ([*RETRIEVE, "--set", "=4"], "error: --set: expected KEY=VALUE, got '=4' (an empty KEY)"),
        (
            ["retrieve-eval", "--bundle", "TMP/b.npz", "--method", "basic", "--set", "qe_k=2", "--set", "basic.qe_k=3"],
            "error: --set: basic.qe_k given twice (as qe_k and basic.qe_k)",
        ),
        (
            ["correlate", "--metrics", "bleu4", "--benchmarks", "foil", "--data-root", "TMP", "--variant", "foil=1-ref",
             "--variant", "foil=2-refs"],
            "error: --variant: key 'foil' given twice ('foil=1-ref' and 'foil=2-refs'); give each key once",
        ),
    ],
)  # fmt: skip
def test_a_repeated_or_malformed_key_value_is_a_usage_error(args, said, tmp_path, capsys):
    """Every repeated `--opt KEY=VALUE` option has one parser (recon_score.key_values): a key given twice is
    refused (the later value no longer wins silently) in one line naming the option and the item, exit 2, before
    anything is written."""
    (tmp_path / "b.npz").write_bytes(b"")
    out = tmp_path / "out"
    argv = [a.replace("TMP", str(tmp_path)) for a in args]
    assert main([*argv, "--out", str(out)] if "--bundle" not in args else argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [said]
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "--preset", "smoke"],
        ["describe", "--preset", "smoke"],
        ["generate", "paraphrase", "--model", "smoke:qwen3-text"],
    ],
)
def test_dataset_without_root_is_one_usage_error(argv, tmp_path, capsys):
    """Every command with the shared --dataset option refuses it without --root in the same words, before any
    model is built and nothing written."""
    assert main([*argv, "--dataset", "rsitmd", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--dataset rsitmd needs --root DIR (the dataset's folder: annotations + images/)" in err
    assert not (tmp_path / "o").exists()


def test_smoke_model_runs_say_their_numbers_are_meaningless(tmp_path, capsys):
    """`retrieve` with smoke:open-clip prints the banner; text metrics on a real run's rows do not."""
    from tests.retrieval import layouts

    root = layouts.xview2(tmp_path / "x")
    argv = ["retrieve", "--benchmark", "xview2-cir", "--root", str(root), "--encoder", "smoke:open-clip"]
    assert main([*argv, "--methods", "text,image", "--device", "cpu", "--out", str(tmp_path / "r")]) == 0
    assert "meaningless" in capsys.readouterr().err
    (tmp_path / "scores.jsonl").write_text('{"id": "a", "image": "x.png", "caption": "a farm"}\n')
    (tmp_path / "refs.json").write_text('{"x.png": ["a farm"]}')
    argv = [
        "metrics",
        "add",
        str(tmp_path),
        "--metrics",
        "bleu4",
        "--references",
        str(tmp_path / "refs.json"),
    ]
    assert main(argv) == 0
    assert "meaningless" not in capsys.readouterr().err


def test_no_follow_symlinks_holds_for_its_command_only(tmp_path, sample_dir, monkeypatch):
    """`--no-follow-symlinks` refuses a linked image for the command it is given to, and run.json says so; the
    next command in the same process (a notebook or a test calling `main` twice) follows links again."""
    from tests.smoke_cli import smoke

    monkeypatch.delenv("RECONSCORE_FOLLOW_SYMLINKS", raising=False)
    images = tmp_path / "images"
    images.mkdir()
    (images / "linked.tif").symlink_to(sample_dir / "images" / "UCM_1.tif")
    caps = tmp_path / "c.jsonl"
    caps.write_text(json.dumps({"id": "a", "image": "linked.tif", "caption": "farmland"}) + "\n")
    args = ("--captions", str(caps), "--images", str(images))

    def run(out, *flags):
        code = main([*flags, *smoke("score", out, *args)])
        row = json.loads((out / "scores.jsonl").read_text())
        return code, row["error"], json.loads((out / "run.json").read_text())["provenance"]["follow_symlinks"]

    code, error, followed = run(tmp_path / "refused", "--no-follow-symlinks")
    assert (code, followed) == (3, False) and "no-follow-symlinks" in error
    assert run(tmp_path / "followed") == (0, None, True)


@pytest.mark.parametrize(
    "argv",
    [
        ["annotate", "build", "--candidates", "TMP/c.csv", "--images", "TMP", "--out", "TMP/o"],
        ["annotate", "build", "--only", "contested", "--collected", "TMP"],
        ["annotate", "collect", "TMP", "TMP/c.csv", "--out", "TMP/o"],
        ["correlate", "--preferences", "TMP/c.csv", "--format", "ranking", "--metrics", "bleu1", "--out", "TMP/o"],
    ],
)  # fmt: skip
def test_a_negative_seed_is_a_usage_error(argv, tmp_path, capsys):
    """A seed reaches numpy's default_rng, which refuses a negative one (a ValueError traceback, once): every
    --seed of annotate's shuffles and of a bootstrap takes 0 or more, exit 2, before anything is read."""
    (tmp_path / "c.csv").write_text("image,candidate,model\na.png,x,m1\na.png,y,m2\n")
    assert main([*(a.replace("TMP", str(tmp_path)) for a in argv), "--seed", "-1"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--seed': -1 is not in the range x>=0." in err, err
    assert not (tmp_path / "o").exists()
