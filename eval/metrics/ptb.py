"""PTB tokenisation exactly as pycocoevalcap's `PTBTokenizer` (CoreNLP 3.4.1, `-preserveLines -lowerCase`, then
its punctuation list removed), each distinct text once in one JVM start; unlike pycocoevalcap it writes to a private
temporary folder, reads and writes UTF-8 whatever the locale, and turns line breaks inside a text into spaces."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from eval.metrics.java import java_executable, pycocoevalcap_file, stderr_tail
from recon_score.errors import ReconScoreError

# pycocoevalcap.tokenizer.ptbtokenizer.PUNCTUATIONS
PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)
_LINE_BREAKS = re.compile("[\r\n\u2028\u2029\u0085\u000b\u000c]")


def ptb_tokenize(texts: Sequence[str]) -> list[str]:
    """Tokenised, lower-cased, punctuation-free text for each input (same order)."""
    unique = list(dict.fromkeys(_LINE_BREAKS.sub(" ", t) for t in texts))
    if not unique:
        return []
    jar = pycocoevalcap_file("tokenizer/stanford-corenlp-3.4.1.jar", "PTB tokenisation")
    cmd = [java_executable("PTB tokenisation"), "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer"]
    cmd += ["-preserveLines", "-lowerCase", "-encoding", "UTF-8"]
    with tempfile.TemporaryDirectory(prefix="reconscore-ptb-") as tmp:
        src = Path(tmp) / "sentences.txt"
        src.write_text("\n".join(unique), encoding="utf-8")
        proc = subprocess.run([*cmd, str(src)], capture_output=True, check=False)
    if proc.returncode != 0:
        raise ReconScoreError(
            f"the PTB tokenizer (Java) failed with exit code {proc.returncode}: {stderr_tail(proc.stderr)}"
        )
    lines = proc.stdout.decode("utf-8").split("\n")
    if len(lines) < len(unique) or any(lines[len(unique) :]):
        raise ReconScoreError(
            f"the PTB tokenizer returned {len(lines)} lines for {len(unique)} texts; a text may contain a character "
            "it treats as a line break"
        )
    table = {
        text: " ".join(w for w in line.rstrip().split(" ") if w not in PUNCTUATIONS)
        for text, line in zip(unique, lines)
    }
    return [table[_LINE_BREAKS.sub(" ", t)] for t in texts]
