"""Progress for long runs: a tqdm bar on a terminal, plain timestamped lines when stderr is a file.

SLURM, nohup and CI capture stderr in a file, where a redrawn bar shows nothing until the end. There a line
`score[0] 120/1093 captions (11.0%) 1.52 caption/s ETA 0:10:42 failed 2` is printed every
`RECONSCORE_PROGRESS_INTERVAL` seconds (default 30), and once at the end.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("RECONSCORE_PROGRESS_INTERVAL", "30")))
    except ValueError:
        return 30.0


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """`update(n, failed=k)` after each finished unit; `stage(text)` names what is running now."""

    def __init__(
        self,
        total: int,
        *,
        desc: str,
        unit: str,
        initial: int = 0,
        position: int = 0,
        file: TextIO | None = None,
        interval: float | None = None,
    ) -> None:
        self.total, self.done, self.failed, self.desc, self.unit = total, initial, 0, desc, unit
        self.file = file or sys.stderr
        self.interval = _interval() if interval is None else interval
        self._start_done, self._t0, self._last = initial, time.monotonic(), None
        self._stage = ""
        tty = getattr(self.file, "isatty", lambda: False)()
        self._bar = None
        if tty:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                position=position,
                file=self.file,
                dynamic_ncols=True,
            )
        elif total > initial:
            self._line(force=True)

    def stage(self, text: str) -> None:
        self._stage = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)
        else:
            self._line()

    def update(self, n: int = 1, *, failed: int = 0) -> None:
        self.done += n
        self.failed += failed
        if self._bar is not None:
            self._bar.update(n)
            if failed:
                self._bar.set_postfix(failed=self.failed)
        else:
            self._line()

    def line(self) -> str:
        elapsed = time.monotonic() - self._t0
        new = self.done - self._start_done
        rate = new / elapsed if elapsed > 0 else 0.0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = _clock((self.total - self.done) / rate) if rate > 0 else "?"
        parts = [
            f"{self.desc} {self.done}/{self.total} {self.unit}s ({pct:.1f}%)",
            f"{rate:.3g} {self.unit}/s",
            f"ETA {eta}",
            f"elapsed {_clock(elapsed)}",
            f"failed {self.failed}",
        ]
        if self._stage:
            parts.append(self._stage)
        return " ".join(parts)

    def _line(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or self._last is None or now - self._last >= self.interval:
            self._last = now
            print(f"[{time.strftime('%H:%M:%S')}] {self.line()}", file=self.file, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.total > self._start_done:
            self._line(force=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
