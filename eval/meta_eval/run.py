"""`reconscore correlate --benchmarks ...`: the suite as one Run (recon_score.run_engine.RunFolder): every
(benchmark, variant, metric) item is journaled with its table rows, so a rerun resumes where it stopped and a
finished run is a no-op; progress per item, also off a terminal."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from eval.meta_eval.benchmarks import parse_benchmarks
from eval.meta_eval.suite import IMAGE_DIRS, IMAGES_DIR, Loaded, frame, load, output_files, statistics
from eval.metrics.clip import DEFAULT_ENCODER
from recon_score.atomic_io import file_digest
from recon_score.errors import ReconScoreError
from recon_score.run_engine import Item, RunFolder, RunSpec, Stage
from recon_score.run_outputs import META_EVAL_CSV, META_EVAL_MD, RECORD, output_file

KIND = "meta-eval"


@dataclass
class MetaEvalJob:
    benchmarks: str | list[str]  # `all` or names
    data_root: Path  # DIR: DIR/<benchmark folder>/ in the layout its download has
    metrics: str | list[str]
    out: Path
    variants: dict[str, str] = field(default_factory=dict)  # benchmark -> variant (default: its first)
    preset: str = "paper"  # for recon_score
    encoder: str = DEFAULT_ENCODER
    long_text: str = "truncate"
    device: str | None = None
    n_boot: int = 1000
    seed: int = 0
    metric_instances: dict = field(default_factory=dict, repr=False)  # ready metrics to reuse (tests)
    argv: list[str] = field(default_factory=list)


@dataclass
class MetaEvalResult:
    table: pd.DataFrame  # the rows of meta_eval.csv
    skipped: dict[str, str]  # benchmark (or benchmark/metric) -> why it was not run
    run: dict
    written: list[Path]


def _item(loaded: Loaded, metric: str) -> str:
    return f"{loaded.benchmark.name}/{loaded.variant}/{metric}"


def _clean(rows: list[dict]) -> list[dict]:
    """JSON has no NaN: None in the journal, NaN again in the table."""
    return [
        {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in r.items()} for r in rows
    ]


def _plan_items(job: MetaEvalJob, metrics: list[str]) -> tuple[list[tuple[Loaded, str]], dict[str, str]]:
    """The (benchmark, metric) items to run, and what is skipped with the reason."""
    from eval.metrics import get_metric_info

    items, skipped = [], {}
    for name in parse_benchmarks(job.benchmarks) if isinstance(job.benchmarks, str) else job.benchmarks:
        loaded = load(name, job.data_root, job.variants.get(name))
        if loaded.table is None:
            skipped[name] = loaded.skipped
            continue
        for m in metrics:
            if get_metric_info(m).needs_images and not loaded.has_images:
                skipped[f"{name}/{m}"] = (
                    f"{m} needs images: put them in {Path(job.data_root) / loaded.benchmark.folder}/"
                    f"{IMAGE_DIRS.get(loaded.benchmark.folder, IMAGES_DIR)}/ ({loaded.benchmark.images})"
                )
                continue
            items.append((loaded, m))
    return items, skipped


def run_meta_eval(job: MetaEvalJob) -> MetaEvalResult:
    from eval.metrics import parse_metric_names

    metrics = parse_metric_names(job.metrics)
    with RunFolder(KIND, job.out, argv=job.argv) as run:
        items, skipped = _plan_items(job, metrics)
        if not items:
            raise ReconScoreError(
                "no benchmark could be run: " + "; ".join(f"{k}: {v}" for k, v in skipped.items())
            )
        suite = _Suite(job, metrics, items, skipped)
        try:
            res = run.run(suite.spec())
        finally:
            suite.close()
        written = [run.out / n for n in (META_EVAL_CSV, META_EVAL_MD)] + [output_file(run.out, RECORD)]
        return MetaEvalResult(frame(suite.rows(res)), skipped, res.info, written)


def _settings(job: MetaEvalJob, metrics: list[str]) -> dict:
    return {
        "kind": KIND,
        "metrics": metrics,
        "n_boot": job.n_boot,
        "seed": job.seed,
        "preset": job.preset,
        "encoder": job.encoder,
        "long_text": job.long_text,
    }


class _Suite:
    """The command's side of the Run: one item per (benchmark, variant, metric), computed metric by metric; the
    items of one benchmark share its CaptionBatch, and every batch of the run shares the PTB tokens of its texts and
    each encoder's embeddings of its texts and images (CaptionBatch.shared). Each metric is built once for the run,
    so its own model (CycleReward's, FLEUR's judge, ReconScore's scorer) and METEOR's JVM load once, and closed
    after its last item, before the next metric's loads; encoders come from the encoder registry, built once per
    process. The table keeps the benchmark-by-benchmark order."""

    def __init__(self, job: MetaEvalJob, metrics: list[str], items: list[tuple[Loaded, str]], skipped: dict):
        self.job, self.metrics, self.skipped = job, metrics, skipped
        self.position = {_item(ld, m): i for i, (ld, m) in enumerate(items)}  # the table's order
        by_metric = sorted(items, key=lambda it: metrics.index(it[1]))  # stable: benchmarks in order
        self.loaded = {_item(ld, m): (ld, m) for ld, m in by_metric}
        self.batches: dict[int, object] = {}
        self.shared: dict = {}  # PTB tokens and encoder embeddings, once per distinct text/image for the run
        self.instances: dict[str, object] = {}  # metric -> the one instance this run built
        self.remaining: dict[str, int] = {}  # metric -> its items still to compute in this invocation

    def spec(self) -> RunSpec:
        items = [
            Item(
                key,
                {"metric": m, "variant": ld.variant, "files": {p.name: file_digest(p) for p in ld.files}},
                name=key,
            )
            for key, (ld, m) in self.loaded.items()
        ]
        return RunSpec(
            settings=_settings(self.job, self.metrics),
            items=items,
            stages=[Stage(self.compute)],
            outputs=self.outputs,
            record=self.record,
            prepare=self.prepare,
            unit="benchmark x metric item",
            progress="item",
        )

    def prepare(self, todo: list[Item]) -> None:
        """Count each metric's items to do, so its instance is closed after the last one."""
        for item in todo:
            m = self.loaded[item.id][1]
            self.remaining[m] = self.remaining.get(m, 0) + 1

    def metric(self, name: str, options: dict):
        """The run's one instance of metric `name`: the job's own if it gives one, else built on first use."""
        from eval.metrics import build_metric
        from recon_score.progress import announce

        if name in self.job.metric_instances:
            return self.job.metric_instances[name]
        if name not in self.instances:
            announce(f"meta-eval: setting up {name}")
            self.instances[name] = build_metric(name, **options.get(name, {}))
        return self.instances[name]

    def compute(self, batch: list[Item], todo: list[Item]) -> list:
        from eval.metrics import compute_metrics, get_metric_info, metric_options

        job = self.job
        options = metric_options(
            encoder=job.encoder, long_text=job.long_text, preset=job.preset, device=job.device
        )
        out = []
        for item in todo:
            ld, m = self.loaded[item.id]
            if id(ld) not in self.batches:
                self.batches[id(ld)] = batch_of(ld, self.shared)
            scores, _ = compute_metrics(
                [m], self.batches[id(ld)], options=options, metrics={m: self.metric(m, options)}
            )
            hib = get_metric_info(m).higher_is_better
            rows = statistics(
                ld, m, scores[m].to_numpy(), higher_is_better=hib, n_boot=job.n_boot, seed=job.seed
            )
            out.append(({"rows": _clean(rows)}, {}))
            self.remaining[m] = self.remaining.get(m, 1) - 1
            if self.remaining[m] <= 0 and m in self.instances:
                self.instances.pop(m).close()  # its last item: free its model before the next metric's
        return out

    def close(self) -> None:
        """Close the instances still open (an interrupted run)."""
        while self.instances:
            self.instances.popitem()[1].close()

    def rows(self, res) -> list[dict]:
        done = sorted(zip(res.items[""], res.results()), key=lambda ir: self.position[ir[0].id])
        rows = [r for _, result in done for r in result["rows"]]
        nan = ("value", "ci_low", "ci_high")
        return [{k: float("nan") if v is None and k in nan else v for k, v in r.items()} for r in rows]

    def outputs(self, res) -> dict[str, bytes]:
        return output_files(self.rows(res), self.skipped)

    def record(self, res) -> dict:
        job, used = self.job, list(self.loaded.values())
        return {
            "data_root": str(Path(job.data_root).resolve()),
            "benchmarks": sorted({ld.benchmark.name for ld, _ in used}),
            "variants": {ld.benchmark.name: ld.variant for ld, _ in used},
            "metrics": self.metrics,
            "skipped": self.skipped,
            "protocol": {
                "kendall": "scipy.stats.kendalltau(metric, human, variant='b'|'c') x 100 over every judgment row",
                "accuracy": "share of pairs where the preferred caption scores strictly higher, x 100",
                "ci": f"percentile bootstrap over images (95%), {job.n_boot} resamples, seed {job.seed}",
                "published": "eval/meta_eval/published.csv (paper and table per value)",
            },
        }


def decoded_images(table) -> list:
    """A hub set's images, one PIL image per distinct image (rows of one image share it), opened lazily: the
    metric's image reader (recon_score.images.load_image) decodes each once."""
    import io

    from PIL import Image, UnidentifiedImageError

    from recon_score.errors import InputError

    opened: dict[int, object] = {}
    out = []
    for data, source in zip(table["image_bytes"], table["source"]):
        if id(data) not in opened:
            try:
                opened[id(data)] = Image.open(io.BytesIO(data))
            except (OSError, UnidentifiedImageError) as err:  # the row's metric is NaN, its error says why
                opened[id(data)] = InputError(f"{source}: the image bytes are not an image ({err})")
        out.append(opened[id(data)])
    return out


def batch_of(loaded: Loaded, shared: dict | None = None):
    """The benchmark's rows as one CaptionBatch; images resolved under its images folder when it has one."""
    from eval.metrics import CaptionBatch
    from eval.metrics.base import image_sources

    table = loaded.table
    images = None
    if loaded.images_root is None and loaded.has_images:
        images = decoded_images(table)
    elif loaded.images_root is not None:
        images = image_sources(loaded.images_root, table["image"].tolist())
    return CaptionBatch(
        candidates=table["candidate"].tolist(),
        references=table["references"].tolist(),
        images=images,
        shared=shared,
    )
