"""How fast the CLI answers `--help` and argument errors (subcommands import torch & co. only when they run).

    ./dev python benchmarks/cli_startup.py [--repeat 5]

Prints the median wall time of each command, run as a fresh process the way a user types it.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = (
    ["--help"],
    ["score", "--help"],
    ["score", "--no-such-option"],
    ["retrieve", "--help"],
    ["describe", "--help"],
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    exe = shutil.which("reconscore")
    base = [exe] if exe else [sys.executable, "-m", "eval"]
    print(f"{'command':34s} median s  (of {args.repeat})")
    for argv in COMMANDS:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            subprocess.run([*base, *argv], capture_output=True, check=False)
            times.append(time.perf_counter() - t0)
        print(f"{'reconscore ' + ' '.join(argv):34s} {statistics.median(times):.2f}")


if __name__ == "__main__":
    main()
