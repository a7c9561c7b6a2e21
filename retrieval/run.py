"""A full benchmark run (`reconscore retrieve`): load the benchmark, extract (or read cached) features through
the shared encoder, evaluate each method, write the outputs. See docs/retrieval.md, "`reconscore retrieve`"."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from recon_score.atomic_io import file_sha256, sha256_json
from recon_score.errors import EXIT_OK, EXIT_PARTIAL, InputError, ReconScoreError
from recon_score.images import load_image, resolve_under
from recon_score.progress import announce
from recon_score.run_engine import Item, RunFolder, RunResult, RunSpec, Stage
from recon_score.run_outputs import (
    BUNDLE,
    PER_GROUP,
    PER_QUERY,
    PER_QUERY_CSV,
    RECORD,
    RETRIEVE_TABLE,
    TOPK,
    TOPK_CSV,
    method_files,
    metric_table_file,
)
from retrieval.bundle import bundle_bytes, protocol_record
from retrieval.data import EvalData
from retrieval.datasets import Benchmark, load_benchmark
from retrieval.evaluate import EvalResult, evaluate, tie_message
from retrieval.features import FeatureStore, encoder_info, image_identities, info_identity
from retrieval.means import bundled_image_mean
from retrieval.methods import build_method
from retrieval.methods.base import Resources
from retrieval.report import (
    per_group_long,
    query_image_line,
    run_notes,
    seed_table,
    table_title,
    to_markdown,
)
from retrieval.textlists import read_phrases, read_text_list
from retrieval.vocabularies import load_vocabulary

SCHEMA = 1


@dataclass
class RetrieveConfig:
    benchmark: str
    root: Path
    encoder: str
    methods: list[str]
    out: Path
    annotations: Path | None = None
    options: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)  # method -> {field: value}
    vocabulary: Path | None = None
    phrases: Path | None = None  # SEARLE-OTI's concept -> phrases
    corpus_pos: Path | None = None
    corpus_neg: Path | None = None
    checkpoints: dict[str, Path] = field(default_factory=dict)
    captioner: str | None = None  # identities, for run.json; the callables are passed to run_retrieve
    rewriter: str | None = None
    device: str | None = None
    batch_size: int | None = None
    weights_dir: Path | None = None
    cache: bool = True
    cache_dir: Path | None = None
    chunk_size: int | None = None
    ties: str = "index"
    empty_positives: str = "zero"
    group_mean: str = "queries"
    limit: int | None = None
    topk: int = 0  # > 0: also write each query's top-k database items (topk.csv/.parquet)
    index: str = "exact"  # exact | faiss-flat | faiss-ivf | faiss-hnsw (linear methods' top-k)
    save_bundle: bool = False
    overwrite: bool = False

    def as_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}

    @property
    def averaging(self) -> dict[str, str]:
        """How per-query values become group and overall means (retrieval.aggregate.summarize's options)."""
        return {"empty_positives": self.empty_positives, "group_mean": self.group_mean}


@dataclass
class RunOutcome:
    record: dict
    exit_code: int
    table: str = ""  # table.md's markdown ("" when no method ran), for the CLI to print


def _file_digest(path: Path | None) -> str | None:
    """sha256 of a file; of a folder (CompoDiff's release), of its files' names and digests."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        return sha256_json({str(p.relative_to(path)): _file_digest(p) for p in files})
    return file_sha256(path)  # streamed: a checkpoint of gigabytes is never held in memory


def build_eval_data(
    bench: Benchmark, image_feats: torch.Tensor, paths: list[str], text_feats: torch.Tensor
) -> EvalData:
    img_index = {p: i for i, p in enumerate(paths)}
    txt_index = {t: i for i, t in enumerate(bench.texts())}
    q_img = image_feats[torch.tensor([img_index[q.reference] for q in bench.queries], dtype=torch.long)]
    q_txt = text_feats[torch.tensor([txt_index[q.text] for q in bench.queries], dtype=torch.long)]
    db = image_feats[torch.tensor([img_index[p] for p in bench.database], dtype=torch.long)]
    pairs = lambda x: torch.tensor(x, dtype=torch.long).reshape(-1, 2)  # noqa: E731
    with_db_group = bench.database_group is not None
    return EvalData(
        query_image=q_img,
        query_text=q_txt,
        database=db,
        positives=pairs(bench.positives),
        query_group=[q.group for q in bench.queries],
        query_subgroup=[q.subgroup for q in bench.queries]
        if any(q.subgroup for q in bench.queries)
        else None,
        database_group=bench.database_group,
        query_db_group=[q.db_group for q in bench.queries] if with_db_group else None,
        exclude=pairs(bench.exclude) if bench.exclude else None,
        subset=pairs(bench.subset) if bench.subset else None,
        query_ids=[q.id for q in bench.queries],
    ).validate(where=f"benchmark {bench.name}")


def per_query_frame(bench: Benchmark, result: EvalResult) -> pd.DataFrame:
    df = pd.DataFrame({"query_index": range(len(bench.queries)), **result.per_query})
    df["detail"] = result.details if result.details is not None else ""
    return df


def topk_frame(bench: Benchmark, data: EvalData, result: EvalResult) -> pd.DataFrame:
    """One row per (query, rank): the retrieved database image, its score and whether it is a positive."""
    ids, scores = result.topk_ids, result.topk_scores
    q, k = ids.shape
    query = np.repeat(np.arange(q), k)
    item = ids.reshape(-1)
    keep = item >= 0
    positives = data.positives.numpy() if data.positives is not None else np.zeros((0, 2), dtype=np.int64)
    n = max(len(bench.database), 1)
    relevant = np.isin(query * n + item, positives[:, 0] * n + positives[:, 1])
    frame = pd.DataFrame(
        {
            "method": result.method,
            "query_index": query,
            "query_id": [bench.queries[i].id for i in query],
            "rank": np.tile(np.arange(1, k + 1), q),
            "item": [bench.database[i] if i >= 0 else None for i in item],
            "score": scores.reshape(-1),
            "relevant": relevant & keep,
        }
    )
    return frame[keep].reset_index(drop=True)


def _meta_frame(bench: Benchmark) -> pd.DataFrame:
    rows = []
    for i, q in enumerate(bench.queries):
        row = {
            "query_index": i,
            "query_id": q.id,
            "group": q.group,
            "subgroup": q.subgroup,
            "reference": q.reference,
            "text": q.text,
        }
        row.update({f"extra_{k}": v for k, v in q.extra.items()})
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


@dataclass
class _Setup:
    """What the run is, before any model is built or feature read: its fingerprint hashes `settings`."""

    methods: dict
    bench: Benchmark
    vocab: object
    settings: dict
    fingerprint: str
    encoder_info: dict  # the encoder's EncoderInfo as a dict (retrieval.features.encoder_info)
    images: str  # the benchmark images' [path, size, mtime] hashed: a replaced image recomputes every method
    content: str  # Benchmark.content_digest: an edited annotation recomputes every method
    load: Callable[[], object]  # the encoder, built on first call (only when there is work)

    @property
    def encoder(self):
        return self.load()


@dataclass
class _Inputs:
    """The benchmark as evaluated (unreadable images dropped), its features and every method's resources."""

    bench: Benchmark
    data: EvalData
    resources: Resources
    skipped: dict
    features: dict


def run_retrieve(
    cfg: RetrieveConfig,
    *,
    captioner: Callable | None = None,
    rewriter: Callable | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run `cfg` (its outputs: docs/retrieval.md). Raises ReconScoreError when the run cannot start."""
    say = log or (lambda _msg: None)
    note = announce if progress else say  # timestamped start-up lines, before the first bar can show
    t0 = time.perf_counter()
    with RunFolder("retrieve", Path(cfg.out), overwrite=cfg.overwrite) as run:
        note(
            f"retrieve: {cfg.benchmark} from {cfg.root}; encoder {cfg.encoder}; methods {', '.join(cfg.methods)}"
        )
        setup = _setup(cfg, note)
        prepare = lambda: _prepare(cfg, setup, captioner, rewriter, progress, say)  # noqa: E731
        work = _Methods(cfg, setup, prepare, progress, say)
        res = run.run(work.spec(run.out, t0))
    if res.complete:  # nothing built or read: what the records say is said again
        work.recall(res)
    table = work.table if not res.complete else read_table(Path(cfg.out))
    status = res.info.get("methods") or {}
    ran = all((status.get(n) or {}).get("status") == "ok" for n in cfg.methods)
    skipped = (res.info.get("skipped_images") or {}).get("count")
    exit_code = EXIT_OK if ran and not skipped else EXIT_PARTIAL
    return RunOutcome(record=res.info, exit_code=exit_code, table=table)


def _loader(cfg: RetrieveConfig, note: Callable[[str], None]) -> Callable[[], object]:
    """The encoder, built on the first call and kept."""

    @functools.cache
    def load():
        from recon_score.encoders import build_encoder

        note(f"retrieve: loading encoder {cfg.encoder}")
        start = time.perf_counter()
        encoder = build_encoder(
            cfg.encoder, device=cfg.device, weights_dir=cfg.weights_dir, batch_size=cfg.batch_size
        )
        note(f"retrieve: encoder {cfg.encoder} loaded in {time.perf_counter() - start:.1f} s")
        return encoder

    return load


def _setup(cfg: RetrieveConfig, note: Callable[[str], None]) -> _Setup:
    """Methods, benchmark, encoder identity and vocabulary; a bad name or a missing file fails here, before any
    work. The encoder is built here only when the memo of its identity does not match its weights (then `note`
    says so: the minutes before any bar)."""
    methods = {name: build_method(name, cfg.overrides.get(name)) for name in cfg.methods}
    unknown_overrides = set(cfg.overrides) - set(cfg.methods)
    if unknown_overrides:
        raise InputError(
            f"--set names method(s) {sorted(unknown_overrides)} that are not in --methods {cfg.methods}"
        )
    note(f"retrieve: reading the {cfg.benchmark} annotations")
    bench = load_benchmark(cfg.benchmark, cfg.root, annotations=cfg.annotations, **cfg.options)
    bench = bench.limit(cfg.limit)
    if not bench.queries:  # refused before the encoder is built or any file is written in --out
        raise InputError(
            f"{bench.options.get('annotations') or bench.root}: the {bench.name} annotations hold no query; "
            "nothing to evaluate"
        )
    for (
        name,
        defaults,
    ) in bench.protocol.method_defaults.items():  # the benchmark authors' setting, then --set
        if name in methods:
            methods[name] = build_method(name, {**defaults, **cfg.overrides.get(name, {})})
    load = _loader(cfg, note)
    memo = FeatureStore(cfg.cache_dir).root if cfg.cache else None
    info = encoder_info(cfg.encoder, weights_dir=cfg.weights_dir, memo=memo, build=load)
    if not {"image", "text"} <= set(info["modalities"]) or info["kind"] != "embedding":
        raise InputError(
            f"encoder {cfg.encoder!r} embeds {', '.join(info['modalities'])} ({info['kind']}); composed retrieval "
            "needs one image+text embedding space (a CLIP-like spec, e.g. open_clip:ViT-L-14/openai)"
        )
    vocab = load_vocabulary(cfg.vocabulary) if cfg.vocabulary is not None else None
    settings = _jsonable(
        {
            "kind": "retrieve-run",
            "schema": SCHEMA,
            "benchmark": {k: v for k, v in bench.summary().items() if k != "notes"},
            "limit": cfg.limit,
            "encoder": info_identity(info),
            "ties": cfg.ties,
            "files": {k: _file_digest(getattr(cfg, k)) for k in ("phrases", "corpus_pos", "corpus_neg")},
            "vocabulary": None if vocab is None else {k: v for k, v in vocab.record.items() if k != "path"},
            "captioner": cfg.captioner,
            "rewriter": cfg.rewriter,
        }
    )
    images = sha256_json({"images": image_identities(bench.root, bench.image_paths())})[:24]
    content = bench.content_digest()
    return _Setup(methods, bench, vocab, settings, sha256_json(settings), info, images, content, load)


def _prepare(cfg: RetrieveConfig, setup: _Setup, captioner, rewriter, progress: bool, say) -> _Inputs:
    """Features (cached outside the run folder) and the resources the methods draw on."""
    bench, encoder, vocab = setup.bench, setup.encoder, setup.vocab
    store = FeatureStore(cfg.cache_dir, enabled=cfg.cache, progress=progress)
    paths = bench.image_paths()
    say(
        f"{bench.name}: {len(bench.queries)} queries, {len(bench.database)} database images; encoder {cfg.encoder}"
    )
    say(f"query image in the database: {query_image_line(bench.query_image_facts())}")
    image_feats = store.images(encoder, bench.root, paths)
    bench, paths, image_feats, skipped = _drop_unreadable(bench, paths, image_feats, store.skipped, say)
    encode_texts = store.text_encoder(encoder)
    resources = Resources(
        texts=[q.text for q in bench.queries],
        reference_keys=[q.reference for q in bench.queries],
        load_reference=lambda i: load_image(resolve_under(bench.root, bench.queries[i].reference)),
        load_database=lambda i: load_image(resolve_under(bench.root, bench.database[i])),
        encode_texts=encode_texts,
        captioner=captioner,
        rewriter=rewriter,
        checkpoints=dict(cfg.checkpoints),
        encoder=encoder,
    )
    bundled = bundled_image_mean(encoder.info.spec, encoder.info.dim)
    if bundled is not None:  # BASIC's LAION-1M mean for the CLIP it was computed with
        resources.image_mean, resources.image_mean_source = bundled
    if cfg.corpus_pos is not None:
        resources.corpus_pos_texts = read_text_list(cfg.corpus_pos)
        resources.corpus_pos = encode_texts(list(resources.corpus_pos_texts))
    if cfg.corpus_neg is not None:
        resources.corpus_neg = encode_texts(read_text_list(cfg.corpus_neg))
    if vocab is not None:
        resources.vocabulary_texts = vocab.entries
        resources.vocabulary = encode_texts(list(vocab.entries))
    if cfg.phrases is not None:
        resources.concept_phrases = read_phrases(cfg.phrases)
    data = build_eval_data(bench, image_feats, paths, store.texts(encoder, bench.texts()))
    for line in run_notes(bench.notes, data):
        say(line)
    features = {"cache": str(store.root) if cfg.cache else None, "computed": store.computed}
    return _Inputs(bench, data, resources, skipped, features)


class _Methods:
    """What retrieve hands the Run: each method an item (its files under methods/; a method that lacks what it
    needs journals why), the tables and the bundle its final files, run.json its record. The features and the
    methods' resources are prepared only when there is work."""

    def __init__(
        self, cfg: RetrieveConfig, setup: _Setup, prepare: Callable[[], _Inputs], progress: bool, say
    ):
        self.cfg, self.setup, self._prepare, self.progress, self.say = cfg, setup, prepare, progress, say
        self._prepared: _Inputs | None = None
        self.status: dict[str, dict] = {}
        self.results: dict[str, EvalResult] = {}
        self.table, self.files = "", []
        self.out = Path(cfg.out)

    @property
    def inputs(self) -> _Inputs:
        if self._prepared is None:
            self._prepared = self._prepare()
        return self._prepared

    def spec(self, out: Path, t0: float) -> RunSpec:
        items = [Item(name, self._inputs(name), name=f"method {name}") for name in self.setup.methods]
        return RunSpec(
            settings=self.setup.settings,
            items=items,
            stages=[Stage(self.compute)],
            prepare=lambda todo: self.inputs,
            outputs=self.outputs,
            record=lambda res: self.info(res, time.perf_counter() - t0),
            retry_errors=True,  # a method that failed is tried again by the next run
            unit="method",
            depends=self.depends(),
        )

    def depends(self) -> dict:
        """What the final files read besides the records: another value rewrites them from the journal, nothing
        recomputed. (--device, --batch-size, --chunk-size and the cache options change how, not what: a
        finished run is kept.)"""
        cfg = self.cfg
        return {
            "methods": cfg.methods,  # the tables' rows, in this order
            "averaging": cfg.averaging,  # --empty-positives, --group-mean
            "save_bundle": cfg.save_bundle,
            "extra": self.setup.bench.extra_digest(),  # the per-query tables' extra_ columns
        }

    def _inputs(self, name: str) -> dict:
        cfg = self.cfg
        return {
            "method": self.setup.methods[name].describe(),
            "checkpoint": _file_digest(cfg.checkpoints.get(name)),
            "topk": [cfg.topk, cfg.index] if cfg.topk else None,
            "images": self.setup.images,  # which images are unreadable follows from them
            "benchmark": self.setup.content,  # queries, texts, database, positives, exclusions, subsets
        }

    def compute(self, batch: list[Item], todo: list[Item]) -> list:
        name = todo[0].id
        method = self.setup.methods[name]
        missing = method.missing(self.inputs.resources)
        if missing:
            result = {"unavailable": "; ".join(missing), "fix": method.fix_hint()}
            self._unavailable(name, result)
            return [(result, {})]
        (announce if self.progress else self.say)(
            f"retrieve: method {name} on {self.inputs.data.n_queries} queries"
        )
        try:
            res = _evaluate(self.cfg, self.setup.methods[name], self.inputs, self.progress)
        except ReconScoreError as err:
            self.status[name] = {"status": "failed", "reason": str(err)}
            self.say(f"{name}: failed: {err}")
            return [({"error": str(err)}, {})]
        self.results[name] = res
        self.status[name] = {"status": "ok", "resumed": False}
        self.say(f"{name}: {res.seconds:.1f} s")
        result = {"config": res.config, "notes": res.notes, "seconds": res.seconds}
        return [(result, _method_blobs(self.inputs.bench, res))]

    def _unavailable(self, name: str, result: dict) -> None:
        self.status[name] = {"status": "unavailable", "reason": f"it needs {result['unavailable']}"}
        self.status[name]["fix"] = result["fix"]
        self.say(f"{name}: not run, it needs {result['unavailable']}. {result['fix']}")

    def recall(self, res: RunResult) -> None:
        """The journaled methods that could not run, said again and given their status."""
        for name, rec in res.records[""].items():
            if name not in self.status and "unavailable" in rec["result"]:
                self._unavailable(name, rec["result"])

    def _all(self, res: RunResult) -> dict[str, EvalResult]:
        """Every method with a result, in --methods order: computed now, or read back from methods/."""
        self.recall(res)
        for name, rec in res.records[""].items():
            if name not in self.status and "error" not in rec["result"]:  # a failed method has no tables
                self.results[name] = _read_method(self.cfg, self.out, self.inputs.bench, name, rec["result"])
                self.status[name] = {"status": "ok", "resumed": True}
                self.say(f"{name}: read from {self.out / 'methods'}")
        return {n: self.results[n] for n in self.cfg.methods if n in self.results}

    def outputs(self, res: RunResult) -> dict[str, bytes]:
        inputs, cfg = self.inputs, self.cfg
        files, self.table = _tables(inputs.bench, inputs.data, self._all(res), _meta_frame(inputs.bench), cfg)
        if cfg.save_bundle:
            proto = protocol_record(inputs.bench.name, inputs.bench.protocol)
            files[BUNDLE] = bundle_bytes(inputs.data, inputs.resources, proto)
        self.files = list(files)
        return files

    def info(self, res: RunResult, seconds: float) -> dict:
        """run.json's fields of retrieve."""
        cfg, setup, inputs = self.cfg, self.setup, self.inputs
        bench, proto = inputs.bench, inputs.bench.protocol
        method_records = {}
        for name in cfg.methods:
            rec = {"config": setup.methods[name].describe()["config"], **self.status[name]}
            if name in self.results:
                rec.update(self._summary(name))
            method_records[name] = rec
        skipped = inputs.skipped
        return {
            "settings": setup.settings,  # what the fingerprint hashes
            "config": cfg.as_dict(),
            "benchmark": bench.summary(),
            # absolute: the report finds images from any folder
            "images_root": str(Path(bench.root).resolve()),
            "encoder": setup.encoder_info,
            "metrics": {
                "ap": proto.ap,
                "ks": list(proto.ks),
                "map_at": list(proto.map_at),
                "ties": cfg.ties,
                **cfg.averaging,  # empty_positives, group_mean
                "headline": list(proto.headline),
                "values": "fractions in [0, 1] here; percent in the tables",
            },
            "methods": method_records,
            "features": inputs.features,
            "vocabulary": None if setup.vocab is None else setup.vocab.record,
            "skipped_images": {
                "count": len(skipped["items"]),
                "queries_dropped": skipped["queries_dropped"],
                "database_dropped": skipped["database_dropped"],
                "items": [{"path": p, "error": e} for p, e in sorted(skipped["items"].items())],
            },
            "outputs": [*self.files, RECORD],
            "seconds": seconds,
        }

    def _summary(self, name: str) -> dict:
        cfg, data, proto, res = self.cfg, self.inputs.data, self.inputs.bench.protocol, self.results[name]
        rec = {"seconds": res.seconds, "notes": res.notes, "summary": {}}
        rec["tie_range"] = res.tie_range(data, **cfg.averaging)
        if rec["tie_range"]:
            self.say(tie_message(name, rec["tie_range"]))
        for metric in proto.headline:
            s = res.summary(data, metric, order=proto.group_order, **cfg.averaging)
            rec["summary"][metric] = {
                k: getattr(s, k) for k in ("overall", "macro", "per_group", "min_macro", "n_empty")
            }
        return rec


def _evaluate(cfg: RetrieveConfig, method, inputs: _Inputs, progress: bool) -> EvalResult:
    proto = inputs.bench.protocol
    return evaluate(
        method,
        inputs.data,
        resources=inputs.resources,
        ap=proto.ap,
        ks=proto.ks,
        map_at=proto.map_at,
        subset_ks=proto.subset_ks,
        ties=cfg.ties,
        chunk_size=cfg.chunk_size,
        progress=progress,
        topk=cfg.topk,
        index=cfg.index,
    )


def _method_blobs(bench: Benchmark, res: EvalResult) -> dict[str, bytes]:
    """methods/<name>.parquet (+ .topk.npz): the method's per-query results, journaled with it."""
    rows_file, topk_file = method_files(res.method)
    blobs = {rows_file: _parquet_bytes(per_query_frame(bench, res))}
    if res.topk_ids is not None:
        buf = io.BytesIO()
        np.savez(buf, ids=res.topk_ids, scores=res.topk_scores)
        blobs[topk_file] = buf.getvalue()
    return blobs


def _read_method(cfg: RetrieveConfig, out: Path, bench: Benchmark, name: str, info: dict) -> EvalResult:
    rows_file, topk_file = method_files(name)
    df = pd.read_parquet(out / rows_file)
    metric_cols = [c for c in df.columns if c not in ("query_index", "detail")]
    details = df["detail"].tolist() if df["detail"].astype(bool).any() else None
    top_ids = top_scores = None
    if cfg.topk:
        top = np.load(out / topk_file)
        top_ids, top_scores = top["ids"], top["scores"]
    return EvalResult(
        method=name,
        config=info["config"],
        per_query={c: df[c].to_numpy(dtype=float) for c in metric_cols},
        ap_variant=bench.protocol.ap,
        ties=cfg.ties,
        details=details,
        notes=info.get("notes", []),
        seconds=info.get("seconds", 0.0),
        topk_ids=top_ids,
        topk_scores=top_scores,
    )


def _drop_unreadable(
    bench: Benchmark,
    paths: list[str],
    feats: torch.Tensor,
    failed: dict[str, str],
    say: Callable[[str], None],
) -> tuple[Benchmark, list[str], torch.Tensor, dict]:
    """Per-item errors: images the reader refused leave the database, and queries with such a reference leave
    the query set; the run goes on with the rest and run.json names them."""
    bad = {p: failed[p] for p in paths if p in failed}
    info = {"items": bad, "queries_dropped": 0, "database_dropped": 0}
    if not bad:
        return bench, paths, feats, info
    kept = bench.without_images(set(bad))
    info["queries_dropped"] = len(bench.queries) - len(kept.queries)
    info["database_dropped"] = len(bench.database) - len(kept.database)
    first = next(iter(bad.items()))
    say(
        f"warning: skipped {len(bad)} unreadable image(s) ({info['queries_dropped']} queries and "
        f"{info['database_dropped']} database items dropped), e.g. {first[1]}; all listed in run.json "
        "skipped_images"
    )
    if not kept.queries:
        raise InputError(
            f"{bench.name}: no query is left once the unreadable images are dropped ({first[1]})"
        )
    keep = [i for i, p in enumerate(paths) if p not in bad]
    return kept, [paths[i] for i in keep], feats[torch.tensor(keep, dtype=torch.long)], info


def _tables(
    bench: Benchmark, data: EvalData, results: dict[str, EvalResult], meta: pd.DataFrame, cfg: RetrieveConfig
) -> tuple[dict[str, bytes], str]:
    """The final tables' bytes by name, and table.md's text."""
    proto = bench.protocol
    frames = []
    for name, res in results.items():
        df = meta.merge(per_query_frame(bench, res), on="query_index")
        df.insert(0, "method", name)
        frames.append(df)
    per_query = pd.concat(frames, ignore_index=True) if frames else meta.assign(method=pd.Series(dtype=str))
    files = {PER_QUERY_CSV: per_query.to_csv(index=False).encode(), PER_QUERY: _parquet_bytes(per_query)}
    top = [topk_frame(bench, data, res) for res in results.values() if res.topk_ids is not None]
    if top:
        frame = pd.concat(top, ignore_index=True)
        files.update({TOPK_CSV: frame.to_csv(index=False).encode(), TOPK: _parquet_bytes(frame)})
    if not results:
        return files, ""
    metrics = list(dict.fromkeys([*proto.headline, "ap"]))
    files[PER_GROUP] = per_group_long(results, data, metrics, **cfg.averaging).to_csv(index=False).encode()
    md = [f"## {bench.name}: {cfg.encoder}", ""]
    levels = ["group"] + (["subgroup"] if proto.subgroup_table and data.query_subgroup else [])
    for metric in proto.headline:
        for level in levels:
            table = seed_table(
                results,
                data,
                metric,
                level=level,
                order=proto.group_order if level == "group" else (),
                **cfg.averaging,
            )
            files[metric_table_file(metric, level)] = table.to_csv().encode()
            md.append(to_markdown(table, table_title(metric, level, ap=proto.ap, **cfg.averaging)))
    files[RETRIEVE_TABLE] = "\n".join(md).encode()
    return files, "\n".join(md)


def read_table(out: Path) -> str:
    """A finished run's table.md, for the CLI to print again ("" when no method ran)."""
    path = out / RETRIEVE_TABLE
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def _jsonable(obj):
    """The settings as JSON would read them back (tuples as lists, paths as strings), so a diff against run.json
    compares like with like."""
    return json.loads(json.dumps(obj, default=str))
