#!/usr/bin/env bash
# The hostile-file tests (tests/eval/test_hostile_files.py) under an address-space limit and with their
# temporary folder on a 3 MB tmpfs, as docs/development.md describes. Needs root (mount); pytest arguments pass
# through. LIMIT_KB: the `ulimit -v` in kB (default 7 GiB: torch's import peaks near 3.3 GB of address space and
# the whole file near 5.4 GB, measured with VmPeak; a 16 GiB file read whole would not fit).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
LIMIT_KB=${LIMIT_KB:-7340032}
tmp=$(mktemp -d)
cache=$(mktemp -d)
mount -t tmpfs -o size=3m tmpfs "$tmp"
trap 'umount "$tmp"; rmdir "$tmp"; rm -rf "$cache"' EXIT
(
  ulimit -v "$LIMIT_KB"
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RECONSCORE_TEST_CACHE="$cache"
  "$PY" -m pytest -q -p no:cacheprovider --basetemp="$tmp/t" tests/eval/test_hostile_files.py "$@"
)
