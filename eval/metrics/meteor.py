"""METEOR 1.5 (Banerjee & Lavie 2005; Denkowski & Lavie 2014) per caption and over the corpus, driving
pycocoevalcap's jar as it does (`-stdio -l en -norm`, 2 GB heap) on PTB-tokenised text. One JVM per
`MeteorProcess`, reused until `close()`: starting METEOR costs seconds, a caption well under a millisecond."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Sequence

import numpy as np

from eval.metrics.base import CaptionBatch, Metric, MetricOutput, scatter, unique_pairs
from eval.metrics.java import java_executable, pycocoevalcap_file, stderr_tail
from recon_score.errors import ReconScoreError

# The longest text (PTB-tokenised hypothesis or reference, in characters) sent to the jar: its aligner holds
# partial alignments in memory, and with pycocoevalcap's 2 GB heap a 100,000-character caption runs it out of
# memory (which stops the JVM and every row with it); 50,000 characters of prose still score in seconds. Dense
# captions stay far below 10,000. A longer text is that row's error, not sent to Java.
MAX_CHARS = 10_000


def _too_long(cand: str, refs: Sequence[str]) -> str | None:
    """Why a row is not sent to METEOR (a text over MAX_CHARS), or None."""
    if len(cand) > MAX_CHARS:
        return (
            f"caption of {len(cand):,} characters is longer than METEOR's bound of {MAX_CHARS:,}; not scored"
        )
    longest = max((len(r) for r in refs), default=0)
    if longest > MAX_CHARS:
        return f"a reference of {longest:,} characters is longer than METEOR's bound of {MAX_CHARS:,}; not scored"
    return None


def _clean(text: str) -> str:
    """'|||' separates fields in METEOR's protocol; pycocoevalcap strips it (and double spaces) from hypotheses."""
    return text.replace("|||", "").replace("  ", " ")


def _shutdown(proc: subprocess.Popen, stderr) -> None:
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for f in (proc.stdin, proc.stdout, stderr):
        with contextlib.suppress(OSError, ValueError):
            f.close()


class MeteorProcess:
    """A running METEOR jar. Thread-safe; close() (or the context manager, or garbage collection) stops it."""

    def __init__(self, *, heap: str = "2G"):
        jar = pycocoevalcap_file("meteor/meteor-1.5.jar", "METEOR")
        self.cmd = [java_executable("METEOR"), f"-Xmx{heap}", "-Dfile.encoding=UTF-8", "-jar", str(jar)]
        self.cmd += ["-", "-", "-stdio", "-l", "en", "-norm"]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the process; closed by _shutdown)
        self._proc = subprocess.Popen(
            self.cmd, cwd=jar.parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shutdown, self._proc, self._stderr)

    def _fail(self, what: str) -> ReconScoreError:
        self._stderr.seek(0)
        return ReconScoreError(f"METEOR (Java) {what}; its stderr: {stderr_tail(self._stderr.read())}")

    def _readline(self) -> str:
        line = self._proc.stdout.readline()
        if not line:
            raise self._fail(f"stopped unexpectedly (exit code {self._proc.poll()})")
        return line.decode("utf-8").strip()

    def score(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """(n,) METEOR of each hypothesis against its references (each list non-empty)."""
        return self.evaluate(self.statistics(hypotheses, references))[0]

    def statistics(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> list[str]:
        """METEOR's sufficient statistics line of each (hypothesis, references) pair."""
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} reference lists")
        if any(not r for r in references):
            raise ValueError("every hypothesis needs at least one reference")
        self._check_open()
        lines = [
            " ||| ".join(("SCORE", " ||| ".join(_clean(r) for r in refs), _clean(hyp))) + "\n"
            for hyp, refs in zip(hypotheses, references)
        ]
        with self._lock:
            return self._exchange(lines)

    def evaluate(self, stats: Sequence[str]) -> tuple[np.ndarray, float | None]:
        """Segment scores of `stats` lines and the corpus score over all of them (None when empty), from one
        EVAL request as pycocoevalcap sends it."""
        if not stats:
            return np.zeros(0), None
        self._check_open()
        with self._lock:
            # the jar reads the whole line, then answers
            self._write(["EVAL ||| " + " ||| ".join(stats) + "\n"])
            scores = [float(self._readline()) for _ in stats]
            corpus = float(self._readline())
        return np.asarray(scores, dtype=float), corpus

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise ReconScoreError("this MeteorProcess was closed; create a new one")

    def _write(self, lines: list[str]) -> None:
        try:
            self._proc.stdin.write("".join(lines).encode("utf-8"))
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise self._fail(f"stopped reading its input ({err})") from err

    def _exchange(self, lines: list[str]) -> list[str]:
        """Send every line from a helper thread while reading the answers here, so neither pipe fills up."""
        error: list[BaseException] = []

        def feed():
            try:
                for i in range(0, len(lines), 256):
                    self._write(lines[i : i + 256])
            except BaseException as err:  # surfaced below, after the reader stops
                error.append(err)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            out = [self._readline() for _ in lines]
        finally:
            writer.join()
        if error:
            raise error[0]
        return out

    def close(self) -> None:
        self._finalizer()

    @property
    def alive(self) -> bool:
        return self._finalizer.alive and self._proc.poll() is None

    def __enter__(self) -> MeteorProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Meteor(Metric):
    def __init__(self, *, process: MeteorProcess | None = None):
        """`process`: share a running METEOR (e.g. across test modules); otherwise one starts on first use."""
        self._process, self._owned = process, process is None

    @property
    def process(self) -> MeteorProcess:
        if self._process is None:
            self._process = MeteorProcess()
        return self._process

    def score(self, batch: CaptionBatch) -> MetricOutput:
        cands, refs = batch.tokenized()
        errors: list[str | None] = [None] * len(batch)
        rows = []
        for i in batch.reference_rows():
            errors[i] = _too_long(cands[i], refs[i])
            if errors[i] is None:
                rows.append(i)
        pairs, inverse = unique_pairs([cands[i] for i in rows], [refs[i] for i in rows])
        stats = self.process.statistics([c for c, _ in pairs], [list(r) for _, r in pairs]) if pairs else []
        # every scored row (duplicates included) enters the corpus statistics, as in pycocoevalcap
        per, corpus = self.process.evaluate([stats[i] for i in inverse]) if pairs else (np.zeros(0), None)
        values = scatter(len(batch), rows, per)
        info = {"scored_rows": len(rows), "distinct_pairs": len(pairs), "max_chars": MAX_CHARS}
        if corpus is not None:
            info["corpus"] = corpus  # METEOR over the summed statistics, pycocoevalcap's reported value
        if any(errors):
            info["failed_rows"] = sum(e is not None for e in errors)
            return MetricOutput(values, extra={"meteor_error": errors}, info=info)
        return MetricOutput(values, info=info)

    def config(self) -> dict:
        return {
            "jar": "pycocoevalcap meteor-1.5.jar",
            "args": "-stdio -l en -norm",
            "tokenizer": "PTB (pycocoevalcap)",
        }

    def close(self) -> None:
        if self._owned and self._process is not None:
            self._process.close()
            self._process = None
