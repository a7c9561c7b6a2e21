"""How fast the CLI answers --help, argument and file errors, as a ratio to `python -c "import torch"`.

    ./dev python benchmarks/cli_startup.py [--repeat 5]

Every command runs as a fresh process, the way a user types it; the rounds interleave the commands (so a change
of load hits all of them alike) and each line prints the median and the spread over the rounds, with the load
average before and after. Goals (first contact): `reconscore --help` <= 0.07x the import of torch; an argument
or file error < 0.5x, and so is `--preset paper` without its weights (offline, an empty weights folder): the
local weights check imports no torch and never waits on the network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"help": 0.07, "error": 0.5}


def cases(tmp: Path) -> list[tuple[str, str, list[str], dict]]:
    """(label, goal kind, argv after `reconscore`, extra environment)."""
    (tmp / "wrong.jsonl").write_text('{"img": "a.png", "text": "a field"}\n')
    (tmp / "ok.jsonl").write_text('{"image": "a.png", "caption": "a field"}\n')
    out = ["--out", str(tmp / "run")]
    empty = {"RECONSCORE_WEIGHTS": str(tmp / "weights"), "HF_HOME": str(tmp / "hf"), "HF_HUB_OFFLINE": "1"}
    return [
        ("--help", "help", ["--help"], {}),
        ("score --help", "", ["score", "--help"], {}),
        ("score: captions file missing", "error", ["score", "--captions", str(tmp / "no.jsonl"), *out], {}),
        ("score: wrong field names", "error", ["score", "--captions", str(tmp / "wrong.jsonl"), *out], {}),
        (
            "score: --images folder missing",
            "error",
            ["score", "--captions", str(tmp / "ok.jsonl"), "--images", str(tmp / "no"), *out],
            {},
        ),
        ("score: encoder family typo", "error", ["score", "--encoder", "dreamsm:ensemble", *out], {}),
        ("score: --preset smok", "error", ["score", "--preset", "smok", *out], {}),
        (
            "correlate: preferences file missing",
            "error",
            [
                "correlate",
                "--preferences",
                str(tmp / "no.jsonl"),
                "--format",
                "ranking",
                "--metrics",
                "bleu4",
                *out,
            ],
            {},
        ),
        ("score --preset paper, no weights", "error", ["score", "--preset", "paper", *out], empty),
    ]


def run(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False, env={**os.environ, **env})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    exe = shutil.which("reconscore")
    base = [exe] if exe else [sys.executable, "-m", "eval"]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        todo = [("python -c 'import torch'", "", [sys.executable, "-c", "import torch"], {})]
        todo += [(label, kind, [*base, *argv], env) for label, kind, argv, env in cases(Path(tmp))]
        times: dict[str, list[float]] = {label: [] for label, *_ in todo}
        for _ in range(args.repeat):
            for label, _, argv, env in todo:
                times[label].append(run(argv, env))
    load_after = os.getloadavg()
    torch_s = statistics.median(times[todo[0][0]])
    print(
        f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}; {args.repeat} rounds"
    )
    print(f"{'command':36s} {'median s':>9s} {'min-max s':>13s} {'x torch':>8s}  goal")
    for label, kind, _, _ in todo:
        t = times[label]
        ratio = statistics.median(t) / torch_s
        goal = f"<= {GOALS[kind]}x {'ok' if ratio <= GOALS[kind] else 'MISSED'}" if kind else ""
        spread = f"{min(t):.2f}-{max(t):.2f}"
        print(f"{label:36s} {statistics.median(t):9.2f} {spread:>13s} {ratio:8.3f}  {goal}")


if __name__ == "__main__":
    main()
