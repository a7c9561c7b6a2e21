"""Backbone specs of the RS-CIR benchmark paper in `models list`, and named/file vocabularies with their provenance."""

import json

import pytest

from eval.cli import main
from recon_score.encoders import parse_spec
from recon_score.errors import InputError
from retrieval.vocabularies import load_vocabulary


def test_models_list_names_seed_000s_backbones_and_where_their_weights_are(capsys):
    assert main(["models", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["retrieval_backbones"]
    by_name = {r["name"].split(" ")[0]: r for r in rows}
    assert {"RemoteCLIP", "SkyCLIP-50", "GeoRSCLIP", "SigLIP", "CLIP"} <= set(by_name)
    assert "chendelong/RemoteCLIP" in by_name["RemoteCLIP"]["weights"]
    assert "SkyCLIP_ViT_L14_top50pct.zip" in by_name["SkyCLIP-50"]["weights"]
    assert "Zilun/GeoRSCLIP" in by_name["GeoRSCLIP"]["weights"]
    for row in rows:
        family, _name = parse_spec(row["spec"])  # every spec is one the registry parses
        assert family == "open_clip"


def test_freedoms_open_images_list_is_bundled_with_its_provenance():
    vocab = load_vocabulary("freedom:openimages-v7")
    assert len(vocab.entries) == vocab.record["entries"] == 20931
    assert vocab.entries[:2] == ["'Nduja", "10 cane"]
    assert "NikosEfth/freedom" in vocab.record["provenance"] and len(vocab.record["sha256"]) == 64


def test_vocabulary_files_sidecar_provenance_hybrid_and_unreleased(tmp_path):
    rs = tmp_path / "rstext.txt"
    rs.write_text("solar farm\nairport\n")
    (tmp_path / "rstext.txt.provenance").write_text(
        "generated with the RS-CIR benchmark paper A.3's prompt, GPT-4o\n"
    )
    own = load_vocabulary(rs)
    assert own.entries == ["solar farm", "airport"] and own.record["provenance"].startswith("generated")
    hybrid = load_vocabulary(f"hybridtext:{rs}")
    open_images = load_vocabulary("freedom:openimages-v7").entries
    assert hybrid.entries == list(dict.fromkeys(["solar farm", "airport", *open_images]))
    with pytest.raises(InputError, match="not released"):
        load_vocabulary("hybridtext-23k")
    with pytest.raises(InputError, match="neither a file nor a named vocabulary"):
        load_vocabulary(tmp_path / "missing.txt")
