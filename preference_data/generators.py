"""Robustness sets of the ReconScore paper (Table 4: paraphrased and one-fact-perturbed captions; Table 5: short /
medium / long captions written from the same triplets), generated with any text LLM from instruction files. See
docs/studies.md, "Generators". The LLM is any `Complete` callable: this module imports no model code.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from recon_score.textfiles import read_text

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
PERTURBATIONS = ("object", "count", "colour", "spatial")
LENGTHS = ("short", "medium", "long")

Complete = Callable[[list[str]], list[tuple[str | None, str | None]]]


@dataclass(frozen=True)
class Instruction:
    name: str
    path: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def fill(self, **values: str) -> str:
        out = self.text
        for key, value in values.items():  # str.replace: captions may contain braces
            out = out.replace("{" + key + "}", value)
        return out


def load_instruction(name_or_path: str | Path) -> Instruction:
    """A bundled instruction by name (e.g. 'paraphrase', 'perturb_count') or a text file of your own."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROMPTS_DIR / f"{name_or_path}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROMPTS_DIR.glob("*.txt")))
        raise FileNotFoundError(
            f"instruction {name_or_path!r} not found (bundled: {known}; or give a .txt path)"
        )
    text = read_text(path).strip()
    if not text:
        raise ValueError(f"instruction file {path} is empty")
    return Instruction(path.stem, str(path), text)


@dataclass
class Request:
    id: str  # unique per generated row: SOURCE_ID:kind
    source_id: str
    image: str | None
    source_caption: str
    kind: str
    instruction: Instruction
    prompt: str
    extra: dict

    def row(self, text: str | None, error: str | None) -> dict:
        return {
            "id": self.id,
            "source_id": self.source_id,
            "image": self.image,
            "source_caption": self.source_caption,
            "kind": self.kind,
            **self.extra,
            "caption": text,
            "error": error,
            "instruction": self.prompt,
            "instruction_file": self.instruction.path,
            "instruction_sha256": self.instruction.sha256,
        }


def paraphrase_requests(sources: Sequence[dict], *, instruction: str | Path = "paraphrase") -> list[Request]:
    ins = load_instruction(instruction)
    return [_caption_request(s, "paraphrase", "paraphrase", ins) for s in sources]


def _caption_request(
    source: dict, task: str, kind: str, ins: Instruction, extra: dict | None = None
) -> Request:
    """The request that rewrites one source caption with instruction `ins`."""
    caption = source["caption"]
    return Request(
        f"{source['id']}:{task}",
        str(source["id"]),
        source.get("image"),
        caption,
        kind,
        ins,
        ins.fill(caption=caption),
        extra or {},
    )


def perturb_requests(
    sources: Sequence[dict], *, kinds: Sequence[str] = PERTURBATIONS, every_kind: bool = False
) -> list[Request]:
    """One perturbation per source caption, the kind cycling through `kinds` in input order (or every kind per
    caption with `every_kind`); the kind is recorded in `perturbation`."""
    bad = [k for k in kinds if k not in PERTURBATIONS]
    if bad:
        raise ValueError(f"unknown perturbation kind(s) {bad}; choose from {PERTURBATIONS}")
    ins = {k: load_instruction(f"perturb_{k}") for k in kinds}
    reqs = []
    for i, s in enumerate(sources):
        for k in kinds if every_kind else [kinds[i % len(kinds)]]:
            reqs.append(_caption_request(s, f"perturb-{k}", "perturbed", ins[k], {"perturbation": k}))
    return reqs


def triplet_requests(images: Sequence[dict], *, n: int = 10) -> list[Request]:
    """images: {id, image, references: [...]}: one extraction per image from all of its references."""
    ins = load_instruction("extract_triplets")
    return [
        Request(
            f"{im['id']}:triplets",
            str(im["id"]),
            im.get("image"),
            " ".join(im["references"]),
            "triplets",
            ins,
            ins.fill(caption="\n".join(im["references"]), n=str(n)),
            {"references": list(im["references"])},
        )
        for im in images
    ]


_TRIPLET = re.compile(r"<\s*([^<>,]+?)\s*,\s*([^<>,]+?)\s*,\s*([^<>]+?)\s*>")


def parse_triplets(text: str) -> list[tuple[str, str, str]]:
    """<subject, relation, object> per line (also 'subject | relation | object'); other lines are ignored."""
    out = []
    for line in text.splitlines():
        m = _TRIPLET.search(line)
        if m:
            out.append(tuple(x.strip() for x in m.groups()))
        elif line.count("|") == 2:
            parts = [p.strip(" -*•\t") for p in line.split("|")]
            if all(parts):
                out.append(tuple(parts))
    return out


def rewrite_requests(triplet_rows: Sequence[dict], *, lengths: Sequence[str] = LENGTHS) -> list[Request]:
    bad = [k for k in lengths if k not in LENGTHS]
    if bad:
        raise ValueError(f"unknown length(s) {bad}; choose from {LENGTHS}")
    ins = {k: load_instruction(f"rewrite_{k}") for k in lengths}
    reqs = []
    for row in triplet_rows:
        triplets = row.get("triplets") or []
        if not triplets:
            continue
        listing = "\n".join(f"<{s}, {r}, {o}>" for s, r, o in triplets)
        for k in lengths:
            extra = {"triplets": [list(t) for t in triplets]}
            if row.get("references"):
                extra["references"] = row["references"]
            reqs.append(
                Request(
                    f"{row['source_id']}:{k}",
                    row["source_id"],
                    row.get("image"),
                    row["source_caption"],
                    k,
                    ins[k],
                    ins[k].fill(triplets=listing),
                    extra,
                )
            )
    return reqs


def run_requests(requests: Sequence[Request], complete: Complete) -> list[dict]:
    """One row per request, from one `complete` call (batching and resuming are the caller's: the Run's)."""
    outs = complete([r.prompt for r in requests])
    if len(outs) != len(requests):
        raise RuntimeError(f"the LLM returned {len(outs)} answers for {len(requests)} prompts")
    return [r.row(text, err) for r, (text, err) in zip(requests, outs)]
