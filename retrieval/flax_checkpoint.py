"""Read a Flax parameter tree released as a pickle of `flax.serialization.to_bytes` bytes, without executing
pickle and without JAX.

The pickle is only parsed (`pickletools.genops`, which never runs an opcode): it must hold exactly one bytes
object (protocol 3+: ``BINBYTES``/``SHORT_BINBYTES``/``BINBYTES8``, with the framing and memo opcodes pickle
writes around it) and nothing else; any other opcode (a global, a call, a second object) is refused with its
name. The bytes are Flax's msgpack: maps of maps with array leaves as msgpack ext type 1, whose payload is the
msgpack tuple (shape, dtype name, raw C-order bytes) (flax/serialization.py ``_ndarray_to_bytes``); type 3 is a
numpy scalar in the same form. Arrays over 1 GiB are stored by Flax as a map
``{"__msgpack_chunked_array__": True, "shape": {...}, "chunks": {...}}`` of flat pieces and are joined back.
``bfloat16`` leaves are widened to float32 exactly (the bf16 bits are the top half of a float32), so no
``ml_dtypes`` is needed. Every leaf is returned as a writable float32 or native numpy array (``np.frombuffer``
gives read-only views of the file's bytes).
"""

from __future__ import annotations

import pickletools
from pathlib import Path

import numpy as np

from recon_score.errors import InputError

_BYTES_OPS = {"BINBYTES", "SHORT_BINBYTES", "BINBYTES8"}
_FRAMING_OPS = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "STOP"}
_EXT_NDARRAY, _EXT_SCALAR = 1, 3
_CHUNKED = "__msgpack_chunked_array__"


class FlaxCheckpointError(InputError):
    """A file is not a pickled Flax msgpack tree this reader accepts."""


def pickled_bytes(data: bytes, where: str = "checkpoint") -> bytes:
    """The one bytes object of a pickle, read without unpickling; anything else in the pickle is refused."""
    found: bytes | None = None
    try:
        for op, arg, pos in pickletools.genops(data):
            if op.name in _BYTES_OPS and found is None:
                found = arg
            elif op.name not in _FRAMING_OPS:
                what = "a second bytes object" if op.name in _BYTES_OPS else f"opcode {op.name}"
                raise FlaxCheckpointError(
                    f"{where}: refused: the pickle holds {what} at byte {pos}; a MagicLens release is a pickle "
                    "of one bytes object only, and reconscore never executes pickle"
                )
    except FlaxCheckpointError:
        raise
    except ValueError as err:  # truncated or not a pickle at all
        raise FlaxCheckpointError(f"{where}: not a readable pickle ({err})") from err
    if found is None:
        raise FlaxCheckpointError(f"{where}: the pickle holds no bytes object (expected Flax msgpack bytes)")
    return found


def _bfloat16_to_float32(raw: bytes, count: int) -> np.ndarray:
    half = np.frombuffer(raw, dtype="<u2", count=count)
    return (half.astype(np.uint32) << 16).view(np.float32)


def _ndarray(payload: bytes, where: str) -> np.ndarray:
    import msgpack

    try:
        shape, dtype, raw = msgpack.unpackb(payload, raw=True)
        shape = tuple(int(s) for s in shape)
        dtype = dtype.decode() if isinstance(dtype, bytes) else str(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if dtype == "bfloat16":
            flat = _bfloat16_to_float32(raw, count)
        else:
            kind = np.dtype(dtype)
            if kind.hasobject:
                raise ValueError(f"object dtype {dtype}")
            flat = np.frombuffer(raw, dtype=kind, count=count)
        return flat.reshape(shape).copy()  # writable, independent of the file's bytes
    except FlaxCheckpointError:
        raise
    except (ValueError, TypeError) as err:
        raise FlaxCheckpointError(f"{where}: a malformed array leaf ({err})") from err


def _unchunk(tree, where: str):
    if isinstance(tree, dict):
        if tree.get(_CHUNKED) is True:
            shape = tuple(int(tree["shape"][str(i)]) for i in range(len(tree["shape"])))
            chunks = [tree["chunks"][str(i)] for i in range(len(tree["chunks"]))]
            return np.concatenate([np.ravel(c) for c in chunks]).reshape(shape)
        return {k: _unchunk(v, where) for k, v in tree.items()}
    return tree


def msgpack_tree(data: bytes, where: str = "checkpoint") -> dict:
    """Flax's msgpack bytes -> nested dict with numpy leaves (see the module docstring)."""
    try:
        import msgpack
    except ImportError as err:
        raise InputError(
            "reading a Flax checkpoint needs the msgpack package: pip install 'reconscore[magiclens]'"
        ) from err

    def ext(code: int, payload: bytes):
        if code == _EXT_NDARRAY:
            return _ndarray(payload, where)
        if code == _EXT_SCALAR:
            return _ndarray(payload, where)[()]
        raise FlaxCheckpointError(f"{where}: unknown msgpack extension type {code} (Flax writes 1 and 3)")

    try:
        tree = msgpack.unpackb(data, ext_hook=ext, raw=False, strict_map_key=False)
    except FlaxCheckpointError:
        raise
    except (ValueError, TypeError, msgpack.exceptions.UnpackException) as err:
        raise FlaxCheckpointError(f"{where}: not Flax msgpack bytes ({type(err).__name__}: {err})") from err
    if not isinstance(tree, dict):
        raise FlaxCheckpointError(f"{where}: the msgpack tree is a {type(tree).__name__}, not a map")
    return _unchunk(tree, where)


def read_flax_pickle(path: str | Path) -> dict:
    """The parameter tree of a released ``.pkl`` (a pickle of Flax msgpack bytes)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"checkpoint {path} does not exist")
    return msgpack_tree(pickled_bytes(path.read_bytes(), str(path)), str(path))


def flatten(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """{"a": {"b": x}} -> {"a/b": x}."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = np.asarray(value)
    return out
