"""The vocabularies of FreeDom, SEARLE-OTI and CIReVL-style methods, with their provenance (files, the bundled
Open Images list, the RS-CIR benchmark paper's unreleased RSText lists). See docs/retrieval.md, "Vocabularies"."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from recon_score.atomic_io import file_sha256
from recon_score.errors import InputError
from retrieval.textlists import read_text_list


@dataclass(frozen=True)
class NamedVocabulary:
    name: str
    file: str | None  # bundled file under retrieval/assets, None when not released
    provenance: str


VOCABULARIES = {
    v.name: v
    for v in (
        NamedVocabulary(
            "freedom:openimages-v7",
            "freedom_open_image_v7_class_names.txt",
            "FreeDom's Open Images v7 class names (20,931), NikosEfth/freedom data/open_image_v7_class_names.csv "
            "@5df4bca (MIT code; Open Images annotations CC BY 4.0); bundled, see retrieval/assets/PROVENANCE.md",
        ),
        NamedVocabulary(
            "rstext",
            None,
            "the RS-CIR benchmark paper's RSText (GPT-4o, 150-2k concepts): announced, not released; generate it with the RS-CIR benchmark paper A.3's "
            "prompt and pass --vocabulary FILE",
        ),
        NamedVocabulary(
            "hybridtext-23k",
            None,
            "the RS-CIR benchmark paper's HybridText-23k = RSText-2k + Open Images v7: not released; pass "
            "--vocabulary hybridtext:RSTEXT_2K_FILE to merge your RSText-2k with the bundled Open Images list",
        ),
    )
}


@dataclass
class Vocabulary:
    entries: list[str]
    record: dict  # path(s), sha256, entries, provenance: what run.json says about it


def _bundled(name: str) -> Path:
    with resources.as_file(resources.files("retrieval") / "assets" / name) as path:
        return Path(path)


def _from_file(path: Path) -> tuple[list[str], dict]:
    path = Path(path)
    entries = read_text_list(path)
    side = path.with_name(path.name + ".provenance")
    provenance = (
        side.read_text(encoding="utf-8").strip() if side.is_file() else "not stated (no .provenance file)"
    )
    return entries, {"path": str(path), "sha256": file_sha256(path), "provenance": provenance}


def load_vocabulary(value: str | Path) -> Vocabulary:
    """Entries and provenance of `value`: a named vocabulary, ``hybridtext:FILE``, or a file."""
    text = str(value)
    if text in VOCABULARIES:
        named = VOCABULARIES[text]
        if named.file is None:
            raise InputError(f"vocabulary {text!r} is not available: {named.provenance}")
        entries, record = _from_file(_bundled(named.file))
        record = {"name": text, **record, "provenance": named.provenance}
    elif text.startswith("hybridtext:"):
        rs_entries, rs_record = _from_file(Path(text.split(":", 1)[1]))
        oi = _bundled(VOCABULARIES["freedom:openimages-v7"].file)
        entries = list(dict.fromkeys(rs_entries + read_text_list(oi)))
        record = {
            "name": "hybridtext",
            "parts": [rs_record, {"name": "freedom:openimages-v7", "sha256": file_sha256(oi)}],
            "provenance": "RSText file + FreeDom's Open Images v7 list, first occurrences kept (the RS-CIR benchmark paper Sec. 3.4)",
        }
    else:
        if not Path(text).is_file():
            raise InputError(
                f"vocabulary {text!r} is neither a file nor a named vocabulary ({', '.join(VOCABULARIES)})"
            )
        entries, record = _from_file(Path(text))
    record["entries"] = len(entries)
    return Vocabulary(entries=entries, record=record)
