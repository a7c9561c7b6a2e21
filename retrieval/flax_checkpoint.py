"""Read a Flax parameter tree released as a pickle of `flax.serialization.to_bytes` bytes, without executing pickle
and without JAX: the pickle is parsed, never run, and must hold one bytes object; the msgpack leaves become
writable numpy arrays. See docs/retrieval.md, "Learned methods" (MagicLens)."""

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


_PRE_OPS = {0x80: 1, 0x95: 8}  # PROTO, FRAME: their argument sizes
_BYTES_ARG = {ord("C"): 1, ord("B"): 4, 0x8E: 8}  # SHORT_BINBYTES, BINBYTES, BINBYTES8: length sizes
_TAIL_LIMIT = 1 << 16  # after the bytes object pickle writes a few framing/memo bytes and STOP


def _op_name(code: int) -> str:
    op = pickletools.code2op.get(chr(code))
    return op.name if op else f"0x{code:02x}"


def _payload_span(fh, size: int, where: str) -> tuple[int, int]:
    """(offset, length) of the pickle's one bytes object, from the opcodes before it (PROTO, FRAME); the
    payload itself is not read, so a huge or sparse file costs nothing here."""
    pos = 0
    while True:
        head = fh.read(1)
        if not head:
            raise FlaxCheckpointError(
                f"{where}: not a readable pickle (it ends at byte {pos}, before any bytes)"
            )
        code = head[0]
        width = _PRE_OPS.get(code) or _BYTES_ARG.get(code)
        if width is None:
            raise FlaxCheckpointError(
                f"{where}: refused: the pickle holds opcode {_op_name(code)} at byte {pos}; a MagicLens release "
                "is a pickle of one bytes object only, and reconscore never executes pickle"
            )
        arg = fh.read(width)
        if len(arg) < width:
            raise FlaxCheckpointError(f"{where}: not a readable pickle (truncated at byte {pos})")
        pos += 1 + width
        if code in _BYTES_ARG:
            length = int.from_bytes(arg, "little")
            if pos + length > size:
                raise FlaxCheckpointError(
                    f"{where}: not a readable pickle (its bytes object declares {length} bytes; the file has "
                    f"{size - pos} after byte {pos}: truncated?)"
                )
            return pos, length


def _check_tail(tail: bytes, offset: int, where: str) -> None:
    """Only framing/memo opcodes and STOP may follow the bytes object."""
    try:
        for op, _arg, pos in pickletools.genops(tail):
            if op.name not in _FRAMING_OPS:
                what = "a second bytes object" if op.name in _BYTES_OPS else f"opcode {op.name}"
                raise FlaxCheckpointError(
                    f"{where}: refused: the pickle holds {what} at byte {offset + pos}; a MagicLens release "
                    "is a pickle of one bytes object only, and reconscore never executes pickle"
                )
    except ValueError as err:  # truncated or not pickle opcodes
        raise FlaxCheckpointError(f"{where}: not a readable pickle ({err})") from err


def _bfloat16_to_float32(raw: bytes, count: int) -> np.ndarray:
    half = np.frombuffer(raw, dtype="<u2", count=count)
    return (half.astype(np.uint32) << 16).view(np.float32)


def _shape(value, where: str, what: str = "array leaf") -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value
    ):
        raise FlaxCheckpointError(
            f"{where}: a malformed {what} (shape {value!r} is not a list of sizes >= 0)"
        )
    return tuple(value)


def _ndarray(payload: bytes, where: str) -> np.ndarray:
    import msgpack

    try:
        shape, dtype, raw = msgpack.unpackb(payload, raw=True)
        dtype = dtype.decode() if isinstance(dtype, bytes) else str(dtype)
        if not isinstance(raw, bytes):
            raise TypeError(f"its data is a {type(raw).__name__}, not bytes")
    except (ValueError, TypeError, msgpack.exceptions.UnpackException) as err:
        raise FlaxCheckpointError(f"{where}: a malformed array leaf ({err})") from err
    shape = _shape(shape, where)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    try:
        kind = np.dtype("<u2" if dtype == "bfloat16" else dtype)
    except TypeError as err:
        raise FlaxCheckpointError(f"{where}: a malformed array leaf (dtype {dtype!r})") from err
    if kind.hasobject:
        raise FlaxCheckpointError(f"{where}: a malformed array leaf (object dtype {dtype})")
    if count * kind.itemsize != len(raw):
        raise FlaxCheckpointError(
            f"{where}: a malformed array leaf (shape {list(shape)} of {dtype} needs {count * kind.itemsize} "
            f"bytes, the leaf holds {len(raw)})"
        )
    flat = _bfloat16_to_float32(raw, count) if dtype == "bfloat16" else np.frombuffer(raw, kind, count)
    return _reshaped(flat, shape, where, "array leaf").copy()  # writable, independent of the file's bytes


def _numbered(value, what: str, where: str) -> list:
    """Flax's {"0": x, "1": y, ...} maps (the chunked form's shape and chunks) as a list, keys checked."""
    if not isinstance(value, dict) or sorted(value, key=str) != sorted(str(i) for i in range(len(value))):
        raise FlaxCheckpointError(f"{where}: a malformed chunked array ({what} is not a map of '0'..'n-1')")
    return [value[str(i)] for i in range(len(value))]


def _joined(tree: dict, where: str) -> np.ndarray:
    """A `__msgpack_chunked_array__` map's array, every piece checked before joining."""
    if tree.get(_CHUNKED) is not True or set(tree) != {_CHUNKED, "shape", "chunks"}:
        raise FlaxCheckpointError(
            f"{where}: a malformed chunked array (expected exactly {_CHUNKED}: true, shape, chunks; got "
            f"{', '.join(sorted(map(str, tree)))})"
        )
    shape = _shape(_numbered(tree["shape"], "shape", where), where, "chunked array")
    chunks = _numbered(tree["chunks"], "chunks", where)
    if not chunks or not all(isinstance(c, np.ndarray) for c in chunks):
        raise FlaxCheckpointError(
            f"{where}: a malformed chunked array (its chunks must be arrays, at least one)"
        )
    if len({c.dtype for c in chunks}) != 1:
        raise FlaxCheckpointError(f"{where}: a malformed chunked array (chunks of different dtypes)")
    count, have = int(np.prod(shape, dtype=np.int64)) if shape else 1, sum(c.size for c in chunks)
    if count != have:
        raise FlaxCheckpointError(
            f"{where}: a malformed chunked array (shape {list(shape)} needs {count} values, the chunks hold {have})"
        )
    return _reshaped(np.concatenate([np.ravel(c) for c in chunks]), shape, where, "chunked array")


def _reshaped(flat: np.ndarray, shape: tuple[int, ...], where: str, what: str) -> np.ndarray:
    """`flat` in `shape`; a shape numpy cannot hold (more dimensions than its limit, 64 in numpy 2) is the
    file's fault, said in one line."""
    try:
        return flat.reshape(shape)
    except ValueError as err:
        raise FlaxCheckpointError(
            f"{where}: a malformed {what} (shape of {len(shape)} dimensions: {err})"
        ) from err


def _unchunk(tree, where: str, key: str = ""):
    if isinstance(tree, dict):
        if _CHUNKED in tree:
            return _joined(tree, f"{where}: {key or '(root)'}")
        return {k: _unchunk(v, where, f"{key}/{k}" if key else str(k)) for k, v in tree.items()}
    return tree


def msgpack_tree(data: bytes, where: str = "checkpoint") -> dict:
    """Flax's msgpack bytes -> nested dict with numpy leaves (ext type 1 arrays and type 3 numpy scalars, as
    flax/serialization.py's ``_ndarray_to_bytes`` writes them; bfloat16 widened exactly to float32)."""
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
    """The parameter tree of a released ``.pkl`` (a pickle of Flax msgpack bytes). The file is memory-mapped,
    not read: the pickle's framing is parsed from its first bytes and msgpack reads the payload in place, so
    only the arrays themselves are allocated (a huge or sparse file is refused without reading it)."""
    import mmap

    path, where = Path(path), str(path)
    if not path.is_file():
        raise InputError(f"checkpoint {path} does not exist")
    size = path.stat().st_size
    if size == 0:
        raise FlaxCheckpointError(f"{where}: not a readable pickle (the file is empty)")
    with path.open("rb") as fh:
        start, length = _payload_span(fh, size, where)
        if size - start - length > _TAIL_LIMIT:
            raise FlaxCheckpointError(
                f"{where}: refused: {size - start - length} bytes follow the pickle's bytes object; a MagicLens "
                "release is a pickle of one bytes object only"
            )
        fh.seek(start + length)
        _check_tail(fh.read(), start + length, where)
        fh.seek(start)
        first = fh.read(1)
        if not first or not (0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF)):  # msgpack map markers
            raise FlaxCheckpointError(
                f"{where}: not Flax msgpack bytes (the payload starts with 0x{first.hex() or '(nothing)'}, "
                "not a map)"
            )
        try:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as err:
            raise FlaxCheckpointError(f"{where}: cannot map its {size} bytes ({err})") from err
        with mapped:
            view = memoryview(mapped)[start : start + length]
            try:
                return msgpack_tree(view, where)
            finally:
                view.release()


def flatten(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """{"a": {"b": x}} -> {"a/b": x}."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        elif isinstance(value, (np.ndarray, np.number, int, float)) and not isinstance(value, bool):
            out[name] = np.asarray(value)
        else:
            raise FlaxCheckpointError(f"parameter {name} is a {type(value).__name__}, not an array")
    return out
