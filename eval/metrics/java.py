"""Where Java and pycocoevalcap's jars are. Nothing here downloads anything."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from recon_score.errors import ReconScoreError

JAVA_FIX = "install a Java runtime (>= 8), e.g. `apt-get install default-jre-headless`, or set JAVA_HOME"


class JavaUnavailableError(ReconScoreError):
    pass


def java_executable(what: str) -> str:
    """The `java` to run: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise JavaUnavailableError(f"{what} runs on Java, and no `java` was found on PATH; {JAVA_FIX}")
    return found


def pycocoevalcap_dir() -> Path:
    spec = importlib.util.find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        raise ReconScoreError("the caption metrics need pycocoevalcap: pip install 'pycocoevalcap>=1.2'")
    return Path(next(iter(spec.submodule_search_locations)))


def pycocoevalcap_file(relative: str, what: str) -> Path:
    path = pycocoevalcap_dir() / relative
    if not path.is_file():
        raise ReconScoreError(
            f"{what} needs {path}, which pycocoevalcap's wheel ships; reinstall it: "
            "pip install --force-reinstall 'pycocoevalcap>=1.2'"
        )
    return path


def stderr_tail(data: bytes, limit: int = 2000) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text[-limit:] if text else "(no output on stderr)"
