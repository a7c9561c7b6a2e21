"""The reproduction table of docs/meta-eval.md, written from a finished `reconscore correlate --benchmarks` run:
for every published value of the run's metrics, the measured value x 100 with its 95% CI, the difference and the
status (✓ within the papers' rounding, ✗ not). Prints the table; --write puts it into docs/meta-eval.md between
its markers. Never asserts.

Usage:
  ./dev reconscore correlate --benchmarks flickr8k-expert,flickr8k-cf,thumb --data-root ../shared/data \
      --metrics bleu1,bleu4,rouge,meteor,cider --verify --out runs/meta-eval
  ./dev python benchmarks/meta_eval_table.py runs/meta-eval [--write]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "meta-eval.md"
BEGIN, END = "<!-- reproduction table: begin -->", "<!-- reproduction table: end -->"


def table(run: Path) -> str:
    import pandas as pd

    from recon_score.run_outputs import META_EVAL_CSV

    df = pd.read_csv(run / META_EVAL_CSV, keep_default_na=False, na_values=[""])
    record = json.loads((run / "run.json").read_text(encoding="utf-8"))
    pub = df[df["status"] != "—"]
    first = record["invocations"][0]  # the invocation that computed the values
    argv = list(first["argv"][1:])  # argv[0]: the program
    for flag, shown in (("--data-root", "DATA"), ("--out", "RUN")):  # the machine's paths, not the docs'
        if flag in argv[:-1]:
            argv[argv.index(flag) + 1] = shown
    lines = [
        f"Measured by `reconscore {' '.join(argv)}` (started {first['started']}, finished {first['finished']}), "
        "with DATA holding the Flickr8K text release in DATA/flickr8k/ and THumB 1.0 in DATA/thumb/.",
        "",
        "| benchmark | metric | statistic | measured [95% CI] | published | difference | status | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in pub.to_dict("records"):
        cat = f" ({r['category']})" if isinstance(r["category"], str) and r["category"] else ""
        lines.append(
            f"| {r['benchmark']}{cat} | {r['metric']} | {r['statistic'].replace('_', '-')} | {r['value']:.2f} "
            f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}] | {r['published']:g} | {r['difference']:+.2f} | {r['status']} "
            f"| {r['source']} |"
        )
    ok = int((pub["status"] == "✓").sum())
    lines += ["", f"{ok} of {len(pub)} published values reproduced within their rounding."]
    skipped = record.get("skipped") or {}
    if skipped:
        lines += ["", "Not run here: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()) + "."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a finished `correlate --benchmarks` run folder")
    ap.add_argument("--write", action="store_true", help="replace the table in docs/meta-eval.md")
    args = ap.parse_args()
    text = table(args.run)
    print(text)
    if args.write:
        doc = DOC.read_text(encoding="utf-8")
        head, _, rest = doc.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
