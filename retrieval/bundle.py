"""The features-level bundle (.npz) that `reconscore retrieve-eval` reads and `retrieve --save-bundle` writes:
embeddings, positives, groups and the benchmark's protocol, validated without pickle. See docs/retrieval.md,
"Bundle format"."""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from recon_score.errors import InputError
from recon_score.textfiles import file_problem
from retrieval.choices import AP_VARIANTS
from retrieval.data import EvalData, as_numpy, check_normalised
from retrieval.errors import BundleError
from retrieval.methods.base import Resources

if TYPE_CHECKING:  # a benchmark's protocol: the datasets (and PIL) are not loaded to read a bundle
    from retrieval.datasets.base import Protocol

_RESOURCES = ("corpus_pos", "corpus_neg", "image_mean", "text_mean", "norm_image", "norm_text")  # BASIC's
REQUIRED = ("query_image", "query_text", "database", "positives", "query_group")
OPTIONAL = (
    "query_subgroup",
    "database_group",
    "query_db_group",
    *_RESOURCES,
    "exclude",
    "subset",
    "query_id",
    "protocol",
)
_NORMALISED = ("query_image", "query_text", "database", "corpus_pos", "corpus_neg", "norm_image", "norm_text")
_STRINGS = ("query_group", "query_subgroup", "database_group", "query_db_group", "query_id")
_EMBEDDINGS = ("query_image", "query_text", "database")
_PAIRS = ("positives", "exclude", "subset")
_FIELD = {"query_id": "query_ids"}  # bundle key -> EvalData field, where the names differ


@dataclass
class Bundle:
    path: Path
    data: EvalData
    resources: Resources
    protocol: dict | None = None  # {"benchmark", "ap", "method_defaults", "source"} when the bundle has one


def _strings(arr: np.ndarray, key: str, path: str) -> list[str]:
    if arr.dtype.kind not in ("U", "S"):
        raise BundleError(
            path,
            key,
            f"must be a string array, got dtype {arr.dtype}",
            "Save it with np.array(names, dtype=str).",
        )
    if arr.ndim != 1:
        raise BundleError(path, key, f"must be 1-D, got shape {arr.shape}", "Save one name per row.")
    return [str(x) for x in arr.tolist()]


def _float(arr: np.ndarray, key: str, path: str, *, ndim: int) -> np.ndarray:
    if arr.dtype != np.float32:
        raise BundleError(
            path, key, f"must be float32, got {arr.dtype}", "Convert with arr.astype(np.float32)."
        )
    if arr.ndim != ndim:
        raise BundleError(
            path,
            key,
            f"must have {ndim} dimensions, got shape {arr.shape}",
            "See the bundle format in docs/retrieval.md.",
        )
    return np.ascontiguousarray(arr)


def _pairs(arr: np.ndarray, key: str, path: str) -> np.ndarray:
    if arr.dtype.kind not in ("i", "u") or arr.ndim != 2 or arr.shape[1] != 2:
        raise BundleError(
            path,
            key,
            f"must be an integer array of shape (P, 2), got {arr.dtype} {arr.shape}",
            "Store (query index, database index) rows.",
        )
    return arr.astype(np.int64)


def _reason(err: Exception) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def load_bundle(path: str | Path) -> Bundle:
    """Read and validate a bundle: a key missing, unknown, misshapen, of the wrong dtype or not normalised
    raises BundleError naming the key and the fix."""
    path = Path(path)
    where = str(path)
    arrays = _read_arrays(path)
    tensors = _float_tensors(arrays, where)
    values = {k: tensors[k] for k in _EMBEDDINGS}
    values.update({k: _strings(arrays[k], k, where) for k in _STRINGS if k in arrays})
    values.update({k: _pairs(arrays[k], k, where) for k in _PAIRS if k in arrays})
    data = EvalData(**{_FIELD.get(k, k): v for k, v in values.items()}).validate(
        where=where, rows_checked=True
    )
    resources = Resources(**{k: tensors.get(k) for k in _RESOURCES}, origin="bundle")
    protocol = _protocol(arrays["protocol"], where) if "protocol" in arrays else None
    return Bundle(path=path, data=data, resources=resources, protocol=protocol)


# uncompressed / compressed bytes above which a member is refused (deflate tops out near 1032)
MAX_INFLATION = 200
SMALL_MEMBER = 256 << 20  # members up to this size are read whatever their ratio (strings compress well)


def _memory_bytes() -> int:
    try:
        import os

        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def _check_members(fh, where: str) -> None:
    """Before any array is read: each member's .npy header declares a shape and dtype whose size must be what
    the zip says the member holds, inflate no more than MAX_INFLATION times its stored bytes (past
    SMALL_MEMBER), and all of them must fit in this machine's memory. Nothing is decompressed beyond the
    headers."""
    import numpy.lib.format as npy

    with zipfile.ZipFile(fh) as zf:
        total = 0
        for info in zf.infolist():
            key = info.filename.removesuffix(".npy")
            with zf.open(info) as member:
                try:
                    version = npy.read_magic(member)
                    read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
                    if read is None:
                        raise ValueError(f"npy format version {version}")
                    shape, _, dtype = read(member)
                except ValueError as err:
                    raise BundleError(
                        where, key, f"has no readable .npy header ({err})", "Write it with np.savez."
                    ) from err
                header = member.tell()
            if dtype.hasobject:
                raise BundleError(
                    where, key, "needs pickle to load (an object array)", "Store strings with dtype=str."
                )
            declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if header + declared != info.file_size:
                raise BundleError(
                    where, key, f"declares shape {shape} of {dtype} ({declared} bytes) but the archive holds "
                    f"{info.file_size - header} bytes for it", "The file is damaged or forged; write it again with np.savez."
                )  # fmt: skip
            if info.file_size > max(SMALL_MEMBER, MAX_INFLATION * max(info.compress_size, 1)):
                raise BundleError(
                    where, key, f"inflates from {info.compress_size} to {info.file_size} bytes "
                    f"({info.file_size // max(info.compress_size, 1)}x)", "Refused as a decompression bomb."
                )  # fmt: skip
            total += info.file_size
        if total > _memory_bytes():
            raise BundleError(
                where,
                "*",
                f"holds {total} bytes of arrays, more than this machine's memory",
                "Split the bundle.",
            )


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the .npz, without pickle; only bundle keys, the required ones present."""
    where = str(path)
    if problem := file_problem(path):
        raise InputError(f"bundle {path} {problem}")
    with path.open("rb") as fh:  # ours to close: np.load leaks its own handle when the zip is damaged
        head = fh.read(6)
        fh.seek(0)
        if head.startswith(b"\x93NUMPY"):
            raise InputError(
                f"{path} is a single .npy array, not a .npz bundle; write the bundle with np.savez"
            )
        if head and not head.startswith(b"PK"):  # np.load would take anything else for a pickle
            raise InputError(
                f"{path} is not a .npz file (it starts with {head!r}, a .npz is a zip archive); "
                "write it again with np.savez"
            )
        try:
            _check_members(fh, where)
        except (EOFError, OSError, zipfile.BadZipFile) as err:  # 0 bytes, truncated, not a zip at all
            raise InputError(
                f"{path} is not a readable .npz file ({_reason(err)}); write it again with np.savez"
            ) from err
        fh.seek(0)
        try:
            npz = np.load(fh, allow_pickle=False)
        except ValueError as err:
            raise InputError(
                f"{path} is not a readable .npz without pickle ({err}); store strings as np.str_ arrays"
            ) from err
        except (EOFError, OSError, zipfile.BadZipFile) as err:  # 0 bytes, truncated, not a zip at all
            raise InputError(
                f"{path} is not a readable .npz file ({_reason(err)}); write it again with np.savez"
            ) from err
        with npz:
            keys = set(npz.files)
            missing = [k for k in REQUIRED if k not in keys]
            if missing:
                raise BundleError(where, missing[0], "is missing", f"A bundle needs {', '.join(REQUIRED)}.")
            unknown = sorted(keys - set(REQUIRED) - set(OPTIONAL))
            if unknown:
                raise BundleError(
                    where, unknown[0], "is not a bundle key", f"Known keys: {', '.join(REQUIRED + OPTIONAL)}."
                )
            try:
                return {k: npz[k] for k in keys}
            except ValueError as err:
                if "pickle" in str(err):
                    raise InputError(
                        f"{path}: an array needs pickle to load ({err}); store strings with dtype=str"
                    ) from err
                raise InputError(f"{path} is damaged ({_reason(err)}); write it again with np.savez") from err
            except (EOFError, OSError, zipfile.BadZipFile, zlib.error) as err:  # a damaged member
                raise InputError(f"{path} is damaged ({_reason(err)}); write it again with np.savez") from err


def _float_tensors(arrays: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """The float keys, checked: dtype, rank, one embedding dimension, L2-normalised rows where required."""
    if arrays["query_image"].shape[:1] == (0,):
        raise BundleError(
            where, "query_image", "has 0 rows: no queries to evaluate", "Store one row per query."
        )
    tensors = {}
    for key in (*_NORMALISED, "image_mean", "text_mean"):  # the means are vectors, not rows
        if key in arrays:
            tensors[key] = _float(arrays[key], key, where, ndim=1 if key.endswith("_mean") else 2)
    dim = tensors["database"].shape[1]
    for key, t in tensors.items():
        if t.shape[-1] != dim:
            raise BundleError(
                where, key, f"has dimension {t.shape[-1]}, the database has {dim}", "Use one embedding space."
            )
    for key in _NORMALISED:
        if key in tensors:  # the error names the key, the row and the fix
            check_normalised(tensors[key], repr(key), where=where)
    return tensors


def protocol_record(benchmark: str, protocol: Protocol) -> dict:
    """What a bundle keeps of a benchmark's protocol: enough for `retrieve-eval` to score as `retrieve` did."""
    return {
        "benchmark": benchmark,
        "ap": protocol.ap,
        "method_defaults": {m: dict(v) for m, v in protocol.method_defaults.items()},
        "source": protocol.source,
    }


def _protocol(arr: np.ndarray, where: str) -> dict:
    fix = 'Store np.array(json.dumps({"benchmark": ..., "ap": ..., "method_defaults": {...}}), dtype=str).'
    if arr.dtype.kind != "U" or arr.ndim != 0:
        raise BundleError(where, "protocol", f"must be one JSON string, got {arr.dtype} {arr.shape}", fix)
    try:
        value = json.loads(str(arr))
    except json.JSONDecodeError as err:
        raise BundleError(where, "protocol", f"is not valid JSON ({err})", fix) from None
    defaults = value.get("method_defaults", {}) if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or value.get("ap") not in AP_VARIANTS
        or not isinstance(defaults, dict)
        or not all(isinstance(v, dict) for v in defaults.values())
    ):
        raise BundleError(
            where,
            "protocol",
            f"needs an 'ap' in {', '.join(AP_VARIANTS)} and method_defaults of objects",
            fix,
        )
    value["method_defaults"] = {m: {k: str(x) for k, x in v.items()} for m, v in defaults.items()}
    return value


def save_bundle(
    path: str | Path, data: EvalData, resources: Resources | None = None, protocol: dict | None = None
) -> Path:
    """Write `data` (BASIC's corpora/means from `resources`, the `protocol_record`) as a bundle, atomically."""
    from recon_score.atomic_io import atomic_write_bytes  # loading a bundle needs none of its imports

    path = Path(path)
    atomic_write_bytes(path, bundle_bytes(data, resources, protocol))
    return path


def bundle_bytes(data: EvalData, resources: Resources | None = None, protocol: dict | None = None) -> bytes:
    """A bundle's bytes (a run writes them as one of its final files)."""
    import io

    data.validate()
    r = resources or Resources()
    arrays = {k: as_numpy(getattr(data, k)) for k in _EMBEDDINGS}
    arrays["positives"] = as_numpy(data.positives).astype(np.int64)
    strings = {k: getattr(data, _FIELD.get(k, k)) for k in _STRINGS}  # in this order: the archive's bytes
    arrays.update({k: np.array(v, dtype=str) for k, v in strings.items() if v is not None})
    for key in ("exclude", "subset"):
        if getattr(data, key) is not None:
            arrays[key] = as_numpy(getattr(data, key)).astype(np.int64)
    for key in _RESOURCES:
        value = getattr(r, key)
        if value is not None:
            arrays[key] = as_numpy(value).astype(np.float32)
    if protocol is not None:
        arrays["protocol"] = np.array(json.dumps(protocol, sort_keys=True), dtype=str)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()
