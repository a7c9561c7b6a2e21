#!/usr/bin/env bash
# Run on a machine with PyPI access, from anywhere: downloads the pure-Python wheels the lent GPU machine lacks
# (it has torch, transformers, accelerate, timm, torchmetrics; no network) into benchmarks/gpu/wheels/ (git-ignored).
# Versions: the ones this repository is tested with. Nothing else is fetched (--no-deps); `pip wheel` also turns
# dreamsim 0.2.1, published as a source archive only, into a pure-Python wheel, so the GPU side needs no build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
mkdir -p "$here/wheels"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$here/wheels" \
  "diffusers==0.42.1" "open_clip_torch==3.3.0" "dreamsim==0.2.1" "peft==0.21.2" "ftfy==6.3.1" "wcwidth==0.9.4"
bytes=$(du -sb "$here/wheels" | cut -f1)
ls -l "$here/wheels"
echo "wheels: $((bytes / 1024)) KiB in $here/wheels"
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
  echo "more than 64 MiB: too large to travel with the working tree" >&2
  exit 1
fi
