"""Progress for long work, the one place that draws it: a tqdm bar on a terminal, plain timestamped lines when
stderr is a file (SLURM, nohup, CI capture stderr, where a redrawn bar shows nothing until the end); `announce`
for what has no count. See docs/cli.md, "Progress".
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from typing import TextIO

log = logging.getLogger(__name__)


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("RECONSCORE_PROGRESS_INTERVAL", "30")))
    except ValueError:
        return 30.0


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _beat(ref: weakref.ref, stop: threading.Event, interval: float) -> None:
    """The heartbeat: a line every `interval` seconds until the bar is closed, or dropped unclosed (work that
    raised), or its stream is closed (nobody reads it any more)."""
    while not stop.wait(interval):
        bar = ref()
        if bar is None:
            return
        try:
            bar._line()
        except (OSError, ValueError):
            return
        del bar


def announce(text: str, *, file: TextIO | None = None) -> None:
    """One timestamped line saying what starts now, on a terminal (above any bar) and in a log file alike."""
    stream = file or sys.stderr
    line = f"[{time.strftime('%H:%M:%S')}] {text}"
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s", text)
    if getattr(stream, "isatty", lambda: False)():
        from tqdm.auto import tqdm

        tqdm.write(line, file=stream)
    else:
        print(line, file=stream, flush=True)


def _plural(unit: str) -> str:
    return unit[:-1] + "ies" if unit.endswith("y") and unit[-2:-1] not in "aeiou" else unit + "s"


class Progress:
    """`update(n, failed=k, stage=...)` after each finished unit; `stage(text)` names what is running now;
    `disable` draws nothing; `leave=False` clears a terminal bar at the end."""

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
        leave: bool = True,
        disable: bool = False,
    ) -> None:
        self.total, self.done, self.failed, self.desc, self.unit = total, initial, 0, desc, unit
        self.file = file or sys.stderr
        self.interval = _interval() if interval is None else interval
        self._start_done, self._t0, self._last = initial, time.monotonic(), None
        self._stage = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self.disabled = disable
        tty = getattr(self.file, "isatty", lambda: False)()
        self._bar = None
        if disable:
            return
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
                leave=leave,
            )
        elif total > initial:
            self._line(force=True)
            if self.interval > 0:  # a voice while one long unit runs without an update
                args = (weakref.ref(self), self._stop, self.interval)
                self._heartbeat = threading.Thread(
                    target=_beat, args=args, name=f"progress {desc}", daemon=True
                )
                self._heartbeat.start()

    def stage(self, text: str) -> None:
        self._stage = text
        if self.disabled:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)
        else:
            self._line()

    def update(self, n: int = 1, *, failed: int = 0, stage: str | None = None) -> None:
        """`n` more units done (`failed` of them failed); `stage`, when given, names the state after them, so
        the line printed says the count and the stage of the same moment."""
        self.done += n
        self.failed += failed
        if stage is not None:
            self._stage = stage
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", self.line())
        if self.disabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if stage is not None:
                self._bar.set_postfix_str(stage, refresh=False)
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
            f"{self.desc} {self.done}/{self.total} {_plural(self.unit)} ({pct:.1f}%)",
            f"{rate:.3g} {self.unit}/s",
            f"ETA {eta}",
            f"elapsed {_clock(elapsed)}",
            f"failed {self.failed}",
        ]
        if self._stage:
            parts.append(self._stage)
        return " ".join(parts)

    def _line(self, *, force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if force or self._last is None or now - self._last >= self.interval:
                self._last = now
                print(f"[{time.strftime('%H:%M:%S')}] {self.line()}", file=self.file, flush=True)

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if self.disabled:
            return
        if self._bar is not None:
            self._bar.close()
        elif self.total > self._start_done:
            self._line(force=True)
        self.disabled = True  # a second close prints nothing

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
