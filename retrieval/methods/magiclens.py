"""MagicLens as a (linear) retrieval method: a query is MagicLens(reference, modifier text), a database item
MagicLens(image, empty text); retrieval.magiclens holds the model and its loader. See docs/retrieval.md, "Learned
methods"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from retrieval.methods.base import Method, MethodContext, Prepared, Resources, linear

RELEASE = (
    "gs://gresearch/magiclens/models (magic_lens_clip_large.pkl, magic_lens_clip_base.pkl; code: "
    "github.com/google-deepmind/magiclens, Apache-2.0)"
)


@dataclass(frozen=True)
class MagicLensMethodConfig:
    batch_size: int = 32  # image-text pairs per forward pass


class MagicLensMethod(Method):
    name, config_cls = "magiclens", MagicLensMethodConfig

    def __init__(self, config: MagicLensMethodConfig | None = None):
        super().__init__(config)
        self._model: tuple[Path, object] | None = None
        self._database: dict[int, Tensor] = {}  # global database index -> embedding (one per run)

    def missing(self, r: Resources) -> list[str]:
        needs = r.checkpoint_needs(
            self.name,
            f"its released checkpoint ({RELEASE}) or its `reconscore models convert magiclens` "
            "safetensors, given with --checkpoint magiclens=PATH",
        )
        if r.load_reference is None or r.load_database is None or r.texts is None:
            needs.append(
                "the query and database images and the texts (a benchmark run, not a features bundle)"
            )
        return needs

    def fix_hint(self) -> str:
        return (
            f"Download {RELEASE} and pass --checkpoint magiclens=PATH (the .pkl is read without unpickling; "
            "`reconscore models convert magiclens SRC DST` writes a safetensors copy). Needs `pip install "
            "'reconscore[magiclens]'` (msgpack) for the .pkl."
        )

    def model(self, path: Path):
        from retrieval.magiclens import load_magiclens

        if self._model is None or self._model[0] != path:
            self._model = (path, load_magiclens(path))
            self._database = {}
        return self._model[1]

    def prepare(self, ctx: MethodContext) -> Prepared:
        self.check(ctx.resources)
        r = ctx.resources
        path = Path(r.checkpoints[self.name])
        model = self.model(path)
        device = getattr(r.encoder, "device", None) or torch.device("cpu")
        model.to(device)
        n_db = ctx.database.shape[0]
        db_index = ctx.database_index if ctx.database_index is not None else torch.arange(n_db)
        todo = [i for i in db_index.tolist() if i not in self._database]
        pairs = [(r.load_database, i, "") for i in todo]
        for i, vec in zip(todo, self._embed(model, pairs, device, "database")):
            self._database[i] = vec
        database = torch.stack([self._database[i] for i in db_index.tolist()])
        rows = ctx.query_index.tolist()
        texts = ctx.texts()
        queries = [(r.load_reference, i, t) for i, t in zip(rows, texts)]
        queries = torch.stack(self._embed(model, queries, device, "queries"))
        prepared = linear(queries, database)
        cfg = model.cfg
        prepared.notes.append(
            f"magiclens: {path} (CLIP {cfg.vision_width}-wide ViT/{cfg.patch_size} at {cfg.image_size} px, "
            f"{cfg.embed_dim}-d, {cfg.head_layers} fusion layers); its own CLIP towers embed queries and database "
            "(the run's --encoder features are not used); database images with the empty text"
        )
        return prepared

    def _embed(self, model, pairs: list[tuple], device, what: str) -> list[Tensor]:
        """MagicLens embeddings of (image loader, index, text) triples, in batches (a progress bar counts them)."""
        from open_clip.tokenizer import SimpleTokenizer

        from recon_score.progress import Progress
        from retrieval.magiclens import image_pixels

        tokenizer = SimpleTokenizer(context_length=model.cfg.context_length)
        out: list[Tensor] = []
        bs = self.config.batch_size
        bar = Progress(
            len(pairs), unit="image", desc=f"magiclens {what}", leave=False, disable=len(pairs) < bs
        )
        with torch.inference_mode():
            for start in range(0, len(pairs), bs):
                chunk = pairs[start : start + bs]
                pixels = image_pixels([load(i) for load, i, _ in chunk], model.cfg.image_size).to(device)
                ids = tokenizer([t for _, _, t in chunk]).to(device)
                out.extend(model.embed(pixels, ids).float().cpu())
                bar.update(len(chunk))
        bar.close()
        return out


def magiclens_status() -> tuple[bool, list[str]]:
    """(can a release be read here, lines for `models check magiclens`)."""
    import importlib.util

    lines = [
        f"source: {RELEASE} (Zhang et al., ICML 2024)",
        "weights: given per run, --checkpoint magiclens=PATH (a released .pkl, or the .safetensors of "
        "`reconscore models convert magiclens SRC DST`)",
    ]
    if importlib.util.find_spec("msgpack") is None:
        lines.append(
            "detail: reading a released .pkl needs msgpack: pip install 'reconscore[magiclens]' "
            "(a converted .safetensors needs nothing more)"
        )
        return False, lines
    lines.append("detail: the release is read without JAX or unpickling (msgpack installed)")
    return True, lines
