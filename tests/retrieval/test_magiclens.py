"""MagicLens from its released format: the loader reproduces the authors' embeddings, hostile pickles are refused,
the safetensors conversion is exact, and `retrieve --methods magiclens` runs on a synthetic PatternCom.

The reference outputs come from the authors' model.py/layers.py (JAX/Flax) on a tiny random checkpoint in the
released format (tests/retrieval/data/magiclens/PROVENANCE.md). Tolerance: max abs difference < 1e-5 in float32
for the pixels (also of a PNG read as the authors' data_utils.process_img reads it), the CLIP embeddings and both
MagicLens outputs (measured here: at most 2e-6).
"""

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from eval.cli import main
from tests.retrieval import layouts
from tests.smoke_cli import retrieve_patterncom

msgpack = pytest.importorskip("msgpack")

from retrieval.flax_checkpoint import (  # noqa: E402
    FlaxCheckpointError,
    flatten,
    msgpack_tree,
    read_flax_pickle,
)
from retrieval.magiclens import load_magiclens, model_pixels  # noqa: E402

DATA = Path(__file__).parent / "data" / "magiclens"
RELEASE = DATA / "magiclens_tiny.pkl"
TOL = 1e-5


@pytest.fixture(scope="module")
def reference():
    return dict(np.load(DATA / "magiclens_reference.npz"))


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


def test_the_loader_reproduces_the_authors_embeddings(reference):
    model = load_magiclens(RELEASE)
    assert (model.cfg.embed_dim, model.cfg.head_layers, model.cfg.vision_head_width) == (16, 2, 8)
    images = torch.from_numpy(reference["images"])  # (3, 12, 10, 3): cropped to 10x10, resized to 8x8
    pixels = model_pixels(images, model.cfg.image_size)
    assert _max_diff(pixels.permute(0, 2, 3, 1), reference["pixels"]) < TOL
    ids = torch.from_numpy(reference["ids"]).long()
    with torch.no_grad():
        authors_pixels = torch.from_numpy(reference["pixels"]).permute(0, 3, 1, 2)
        assert _max_diff(model.clip.encode_image(authors_pixels), reference["clip_image"]) < TOL
        assert _max_diff(model.encode_text(ids), reference["clip_text"]) < TOL
        embed = model(pixels, ids)
        assert _max_diff(embed, reference["multimodal_embed"]) < TOL
        assert _max_diff(model.normalize(embed), reference["multimodal_embed_norm"]) < TOL


def test_token_id_0_inside_a_text_is_masked_as_scenic_masks_it(reference):
    """Id 0 is CLIP's bare "!" token ('the banner says "go!".'); scenic's TextEncoder masks keys where the id is
    0, so the authors' embeddings of texts with an inner 0 are what the key mask gives (open_clip's causal mask
    alone is off by ~0.1 here)."""
    model = load_magiclens(RELEASE)
    ids = torch.from_numpy(reference["inner0_ids"]).long()
    pixels = torch.from_numpy(reference["pixels"]).permute(0, 3, 1, 2)
    with torch.no_grad():
        assert _max_diff(model.encode_text(ids), reference["inner0_clip_text"]) < TOL
        assert _max_diff(model.embed(pixels, ids), reference["inner0_multimodal_embed_norm"]) < TOL
        causal_only = model.clip.encode_text(ids)
    assert _max_diff(causal_only, reference["inner0_clip_text"]) > 1e-2


def test_a_png_is_read_as_the_authors_process_img_reads_it(reference):
    """data_utils.process_img: RGB over its maximum, squashed to the model's size with jax.image.resize."""
    from PIL import Image

    from retrieval.magiclens import image_pixels, jax_resize

    rgb = torch.from_numpy(reference["png_rgb"].astype(np.float32))
    squashed = jax_resize((rgb / (rgb.max() + 1e-12))[None], 8)
    assert _max_diff(squashed, reference["png_process_img"]) < TOL
    model = load_magiclens(RELEASE)
    pixels = image_pixels([Image.fromarray(reference["png_rgb"])], model.cfg.image_size)
    with torch.no_grad():
        embed = model.embed(pixels, torch.from_numpy(reference["ids"][:1]).long())
    assert _max_diff(embed, reference["png_embed_norm"]) < TOL


def test_bfloat16_and_chunked_leaves_as_flax_wrote_them():
    tree = msgpack_tree((DATA / "flax_leaves.msgpack").read_bytes())
    expected = np.load(DATA / "flax_leaves.npz")
    assert tree["half"].dtype == np.float32 and np.array_equal(tree["half"], expected["half"])
    big = tree["block"]["big"]  # six 16-byte chunks joined back
    assert big.shape == (2, 3, 4) and np.array_equal(big, expected["big"])
    assert big.flags.writeable and tree["half"].flags.writeable  # copies, not read-only views of the file


class _Runs:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize(
    ("payload", "opcode"),
    [
        ("global", "opcode SHORT_BINUNICODE"),  # the module name of a callable that would run
        ("two", "a second bytes object"),
        ("list", "opcode EMPTY_LIST"),
        ("protocol2", "opcode GLOBAL"),  # protocol 2 stores bytes through _codecs.encode: a call
    ],
)
def test_hostile_pickles_are_refused_without_running(tmp_path, payload, opcode):
    marker = tmp_path / "ran"
    data = {
        "global": lambda: pickle.dumps(_Runs(marker), protocol=4),
        "two": lambda: pickle.dumps(b"abc", protocol=4)[:-1] + pickle.dumps(b"def", protocol=4)[2:],
        "list": lambda: pickle.dumps([b"abc"], protocol=4),
        "protocol2": lambda: pickle.dumps(b"abc", protocol=2),
    }[payload]()
    path = tmp_path / "hostile.pkl"
    path.write_bytes(data)
    with pytest.raises(FlaxCheckpointError, match=f"refused: the pickle holds {opcode}"):
        read_flax_pickle(path)
    assert not marker.exists()
    assert main(["models", "convert", "magiclens", str(path), str(tmp_path / "x.safetensors")]) == 1
    assert not marker.exists() and not (tmp_path / "x.safetensors").exists()
    path.write_bytes(pickle.dumps(msgpack.packb({"w": 1}), protocol=3))  # protocol 3: bytes without a call
    assert read_flax_pickle(path) == {"w": 1}


def test_bad_files_name_the_problem(tmp_path):
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"\x80\x04\x95")
    with pytest.raises(FlaxCheckpointError, match="not a readable pickle"):
        read_flax_pickle(bad)
    bad.write_bytes(pickle.dumps(b"\xc1 not msgpack", protocol=4))
    with pytest.raises(FlaxCheckpointError, match="not Flax msgpack bytes"):
        read_flax_pickle(bad)


def test_convert_writes_safetensors_that_load_to_the_same_model(tmp_path, capsys, reference):
    dst = tmp_path / "magiclens_tiny.safetensors"
    assert main(["models", "convert", "magiclens", str(RELEASE), str(dst)]) == 0
    assert "MagicLens 16-d" in capsys.readouterr().out
    a, b = load_magiclens(RELEASE), load_magiclens(dst)
    pixels = model_pixels(torch.from_numpy(reference["images"]), 8)
    ids = torch.from_numpy(reference["ids"]).long()
    with torch.no_grad():
        assert torch.equal(
            a(pixels, ids), b(pixels, ids)
        )  # the same float32 parameters, the same computation
    assert main(["models", "convert", "magiclens", str(RELEASE), str(tmp_path / "x.pt")]) == 2


def _write_release(tree: dict, path: Path) -> Path:
    """A tree in the released format: pickle of flax msgpack bytes (arrays as ext type 1)."""

    def pack(x):
        if isinstance(x, np.ndarray):
            raw = msgpack.packb((x.shape, x.dtype.name, x.tobytes("C")), use_bin_type=True)
            return msgpack.ExtType(1, raw)
        raise TypeError(type(x))

    path.write_bytes(pickle.dumps(msgpack.packb(tree, default=pack, use_bin_type=True), protocol=4))
    return path


def _full_vocabulary_release(path: Path) -> Path:
    """The tiny release with CLIP's 49,408-token vocabulary and 77-token context, so real text tokenizes."""
    tree = read_flax_pickle(RELEASE)
    text = tree["params"]["clip"]["text"]
    rng = np.random.default_rng(1)
    text["token_embedding"]["embedding"] = rng.normal(0, 0.1, (49408, 16)).astype(np.float32)
    text["positional_embedding"] = rng.normal(0, 0.1, (77, 16)).astype(np.float32)
    return _write_release(tree, path)


def test_retrieve_runs_magiclens_on_a_synthetic_patterncom(tmp_path, capsys):
    release = _full_vocabulary_release(tmp_path / "magic_lens_clip_tiny.pkl")
    assert len(flatten(read_flax_pickle(release))) == len(flatten(read_flax_pickle(RELEASE)))
    root, out = layouts.patterncom(tmp_path / "PatternNet"), tmp_path / "out"
    argv = retrieve_patterncom(root, out, "magiclens,sum", "--checkpoint", f"magiclens={release}",
                               "--topk", "5", "--index", "faiss-flat")  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    record = json.loads((out / "run.json").read_text())
    assert record["methods"]["magiclens"]["status"] == "ok"
    assert any("its own CLIP towers" in n for n in record["methods"]["magiclens"]["notes"])
    per_query = pd.read_parquet(out / "per_query.parquet")
    rows = per_query[per_query["method"] == "magiclens"]
    assert len(rows) == record["benchmark"]["queries"] and rows["ap"].between(0, 1).all()
    assert "| magiclens |" in (out / "table.md").read_text()
    # FAISS searches MagicLens's own database vectors (not the run encoder's): its top 5 agree with hit@5
    top = pd.read_parquet(out / "topk.parquet")
    found = top[top["method"] == "magiclens"].groupby("query_index")["relevant"].any().astype(float)
    assert (found == rows.set_index("query_index")["hit@5"]).all()
    assert main(["models", "check", "magiclens"]) == 0
    assert "gs://gresearch/magiclens/models" in capsys.readouterr().out
    assert main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["retrieval_methods"]
    assert "gs://gresearch/magiclens/models" in listed["magiclens"]["release"]
    assert "navervision/CompoDiff-Aesthetic" in listed["compodiff"]["release"]


def test_magiclens_needs_its_checkpoint_and_images(tmp_path, capsys):
    from retrieval.methods import build_method
    from retrieval.methods.base import Resources

    missing = build_method("magiclens").missing(Resources())
    assert "--checkpoint magiclens=PATH" in missing[0] and "features bundle" in missing[1]
