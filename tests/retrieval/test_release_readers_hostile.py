"""Hostile MagicLens releases (pickles of Flax msgpack bytes), each built here in a temporary folder: every one is
a one-line error naming the file and the item, the read never loads the whole file, and in `retrieve` a bad
release fails the `magiclens` method alone."""

from __future__ import annotations

import json
import pickle

import msgpack
import numpy as np
import pandas as pd
import pytest

from eval.cli import main
from retrieval.flax_checkpoint import FlaxCheckpointError, read_flax_pickle
from retrieval.magiclens import state_from_release
from tests.retrieval import layouts
from tests.smoke_cli import retrieve_patterncom


def leaf(arr: np.ndarray, shape=None) -> msgpack.ExtType:
    """flax.serialization's ndarray ext (type 1): msgpack (shape, dtype name, raw bytes)."""
    shape = list(arr.shape) if shape is None else shape
    return msgpack.ExtType(1, msgpack.packb((shape, arr.dtype.name, arr.tobytes())))


def release(path, tree) -> str:
    path.write_bytes(pickle.dumps(msgpack.packb(tree), protocol=4))
    return str(path)


def chunked(**change):
    out = {"__msgpack_chunked_array__": True, "shape": {"0": 2, "1": 3},
           "chunks": {"0": leaf(np.arange(3, dtype=np.float32)), "1": leaf(np.arange(3, dtype=np.float32))}}  # fmt: skip
    out.update(change)
    return {k: v for k, v in out.items() if v is not None}


CHUNKED = {
    "no shape": (chunked(shape=None), "expected exactly"),
    "no chunks": (chunked(chunks=None), "expected exactly"),
    "flag not true": (chunked(__msgpack_chunked_array__="yes"), "expected exactly"),
    "extra key": (chunked(extra=1), "expected exactly"),
    "shape a list": (chunked(shape=[2, 3]), "shape is not a map"),
    "chunk keys": (chunked(chunks={"1": leaf(np.zeros(6, np.float32))}), "chunks is not a map"),
    "chunk a string": (chunked(chunks={"0": "abc"}), "chunks must be arrays"),
    "negative size": (chunked(shape={"0": -2, "1": -3}), "sizes >= 0"),
    "too few values": (chunked(shape={"0": 4, "1": 3}), "needs 12 values, the chunks hold 6"),
    "mixed dtypes": (chunked(chunks={"0": leaf(np.zeros(3, np.float32)), "1": leaf(np.zeros(3, np.int8))}), "dtypes"),
    # 100 sizes of 1: the values add up, but numpy holds at most 64 dimensions (its raw ValueError, before)
    "100 dimensions": (chunked(shape={str(i): 1 for i in range(100)}, chunks={"0": leaf(np.zeros(1, np.float32))}),
                       "shape of 100 dimensions"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CHUNKED))
def test_malformed_chunked_arrays_are_named(tmp_path, case):
    tree, message = CHUNKED[case]
    path = release(tmp_path / "bad.pkl", {"params": {"img": {"w": tree}}})
    with pytest.raises(
        FlaxCheckpointError, match=rf"bad\.pkl: params/img/w: a malformed chunked array.*{message}"
    ):
        read_flax_pickle(path)


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        (
            {"params": {"w": leaf(np.zeros(4, np.float32), shape=[-1])}},
            r"shape \[-1\] is not a list of sizes",
        ),
        ({"params": {"w": leaf(np.zeros(4, np.float32), shape=[5])}}, r"needs 20 bytes, the leaf holds 16"),
        ({"params": {"w": leaf(np.zeros(4, np.float32), shape=[True])}}, r"not a list of sizes"),
        ({"params": [1, 2]}, r"'params' is a list, not a parameter tree"),
        ({"params": {"w": "text"}}, r"parameter w is a str, not an array"),
        ({"params": {"w": leaf(np.zeros(1, np.float32), shape=[1] * 100)}}, r"shape of 100 dimensions"),
    ],
)
def test_bad_leaves_and_params_are_named(tmp_path, tree, message):
    path = release(tmp_path / "bad.pkl", tree)
    with pytest.raises(ValueError, match=rf"bad\.pkl: .*{message}"):
        state_from_release(path)


def test_a_huge_sparse_release_is_refused_without_reading_it(tmp_path):
    """An 8 GB sparse .pkl (a BINBYTES8 header over zeros) used to be read whole: a MemoryError."""
    path = tmp_path / "sparse.pkl"
    size = 8 << 30
    with path.open("wb") as fh:
        fh.write(b"\x80\x04\x8e" + size.to_bytes(8, "little"))
        fh.seek(11 + size)
        fh.write(b".")
    with pytest.raises(
        FlaxCheckpointError, match=r"sparse\.pkl: not Flax msgpack bytes \(the payload starts with 0x00"
    ):
        read_flax_pickle(path)
    (tmp_path / "short.pkl").write_bytes(b"\x80\x04\x8e" + size.to_bytes(8, "little") + b"\x80")
    with pytest.raises(FlaxCheckpointError, match=r"declares 8589934592 bytes; the file has 1"):
        read_flax_pickle(tmp_path / "short.pkl")


def test_a_bad_release_fails_magiclens_alone(tmp_path, capsys):
    path = release(tmp_path / "bad.pkl", {"params": {"img": {"w": chunked(shape=None)}}})
    root, out = layouts.patterncom(tmp_path / "PatternNet"), tmp_path / "out"
    argv = retrieve_patterncom(root, out, "text,magiclens", "--checkpoint", f"magiclens={path}")
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "malformed chunked array" in err
    record = json.loads((out / "run.json").read_text())
    assert (
        record["methods"]["text"]["status"] == "ok" and record["methods"]["magiclens"]["status"] == "failed"
    )
    assert "bad.pkl: params/img/w" in record["methods"]["magiclens"]["reason"]
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert set(per_query["method"]) == {"text"}
    assert main(["models", "convert", "magiclens", path, str(tmp_path / "x.safetensors")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "bad.pkl: params/img/w: a malformed chunked array" in err


def test_a_method_scoring_nan_fails_alone(tmp_path, monkeypatch, capsys):
    """NaN similarities (a degenerate feature, a broken method) fail that method and the run goes on."""
    from retrieval.methods.base import Prepared
    from retrieval.methods.baselines import ImageOnly

    def nan_prepare(self, ctx):
        width = len(ctx.database)
        return Prepared(score=lambda rows, out: out.fill(np.nan), width=width)

    monkeypatch.setattr(ImageOnly, "prepare", nan_prepare)
    root, out = layouts.patterncom(tmp_path / "PatternNet"), tmp_path / "out"
    assert main(retrieve_patterncom(root, out, "text,image")) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "image produced NaN scores" in err
    record = json.loads((out / "run.json").read_text())
    assert record["methods"]["text"]["status"] == "ok" and record["methods"]["image"]["status"] == "failed"
    assert set(pd.read_parquet(out / "per_query.parquet")["method"]) == {"text"}
