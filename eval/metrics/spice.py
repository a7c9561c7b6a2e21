"""SPICE (Anderson et al. 2016) per caption with pycocoevalcap's `spice-1.0.jar`, on PTB-tokenised text. It never
downloads CoreNLP 3.6.0 (docs/correlate.md says where the jars go); one JVM per batch, its parse cache under
$RECONSCORE_CACHE/spice."""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from eval.metrics.base import CaptionBatch, Metric, MetricOutput, scatter, unique_pairs
from eval.metrics.java import java_executable, pycocoevalcap_dir, pycocoevalcap_file, stderr_tail
from recon_score.errors import ReconScoreError

CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
CORENLP_URL = "http://nlp.stanford.edu/software/stanford-corenlp-full-2015-12-09.zip"


class SpiceUnavailableError(ReconScoreError):
    pass


def corenlp_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("RECONSCORE_CORENLP_DIR"):
        dirs.append(Path(os.environ["RECONSCORE_CORENLP_DIR"]).expanduser())
    dirs.append(pycocoevalcap_dir() / "spice" / "lib")
    return dirs


def find_corenlp() -> Path:
    """The folder holding both CoreNLP 3.6.0 jars; SpiceUnavailableError names the missing ones and where to put
    them."""
    dirs = corenlp_dirs()
    for d in dirs:
        if all((d / jar).is_file() for jar in CORENLP_JARS):
            return d
    lib = dirs[-1]
    missing = [jar for jar in CORENLP_JARS if not (lib / jar).is_file()]
    raise SpiceUnavailableError(
        f"SPICE needs Stanford CoreNLP 3.6.0, and {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} missing (looked in {', '.join(str(d) for d in dirs)}). "
        f"reconscore does not download it. On a machine with network, get {CORENLP_URL}, take "
        f"stanford-corenlp-full-2015-12-09/{CORENLP_JARS[0]} and .../{CORENLP_JARS[1]} out of the zip, and put "
        f"both in {lib} or in a folder named by RECONSCORE_CORENLP_DIR. The other metrics work without them."
    )


def _cache_dir() -> Path:
    from recon_score.paths import cache_root

    path = cache_root() / "spice"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_spice(tests: list[str], refs: list[list[str]], *, corenlp: Path, heap: str = "8G") -> list[float]:
    """SPICE F-score ("All") per (test, refs), one JVM for the list. NaN where SPICE gives none."""
    jar = pycocoevalcap_file("spice/spice-1.0.jar", "SPICE")
    classpath = os.pathsep.join([str(jar), str(jar.parent / "lib" / "*"), str(corenlp / "*")])
    with tempfile.TemporaryDirectory(prefix="reconscore-spice-") as tmp:
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        items = [{"image_id": i, "test": t, "refs": list(r)} for i, (t, r) in enumerate(zip(tests, refs))]
        src.write_text(json.dumps(items), encoding="utf-8")
        cmd = [java_executable("SPICE"), f"-Xmx{heap}", "-Dfile.encoding=UTF-8", "-cp", classpath]
        cmd += ["edu.anu.spice.SpiceScorer", str(src), "-cache", str(_cache_dir()), "-out", str(dst)]
        cmd += ["-subset", "-silent"]
        proc = subprocess.run(cmd, cwd=jar.parent, capture_output=True, check=False)
        if proc.returncode != 0 or not dst.is_file():
            raise ReconScoreError(
                f"SPICE (Java) failed with exit code {proc.returncode}: {stderr_tail(proc.stderr)}"
            )
        results = json.loads(dst.read_text(encoding="utf-8"))
    by_id = {int(r["image_id"]): r for r in results}
    out = []
    for i in range(len(tests)):
        f = by_id.get(i, {}).get("scores", {}).get("All", {}).get("f")
        try:
            f = float(f)
        except (TypeError, ValueError):
            f = math.nan
        out.append(f)
    return out


class Spice(Metric):
    def __init__(self):
        self.corenlp = find_corenlp()  # fail before any work

    def score(self, batch: CaptionBatch) -> MetricOutput:
        cands, refs = batch.tokenized()
        rows = batch.reference_rows()
        pairs, inverse = unique_pairs([cands[i] for i in rows], [refs[i] for i in rows])
        per = (
            run_spice([c for c, _ in pairs], [list(r) for _, r in pairs], corenlp=self.corenlp)
            if pairs
            else []
        )
        values = scatter(len(batch), rows, np.asarray(per, dtype=float)[inverse] if pairs else [])
        return MetricOutput(values, info={"scored_rows": len(rows), "corenlp": str(self.corenlp)})

    def config(self) -> dict:
        return {
            "jar": "pycocoevalcap spice-1.0.jar",
            "corenlp": str(self.corenlp),
            "tokenizer": "PTB (pycocoevalcap)",
        }
