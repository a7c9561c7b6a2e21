#!/usr/bin/env bash
# On the lent GPU machine, from the repository root: bash benchmarks/gpu/run.sh [gpu_throughput.py options]
# Installs the wheels from prepare.sh into a private folder (no index, no deps), then runs the benchmark within
# 8 minutes: one table on stdout, one JSON in $OUT/gpu_throughput.json (when OUT is set) or --json FILE.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
wheels="$repo/benchmarks/gpu/wheels"
deps="${DEPS_DIR:-${TMPDIR:-/tmp}/reconscore-gpu-deps}"
py="${PYTHON:-python3}"  # the GPU machine has python3, not python
if ! ls "$wheels"/*.whl > /dev/null 2>&1; then
  echo "no wheels in $wheels: run benchmarks/gpu/prepare.sh first (on a machine with network)" >&2
  exit 2
fi
"$py" -m pip install --quiet --no-index --no-deps --target "$deps" "$wheels"/*.whl
export PYTHONPATH="$repo:$deps${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RECONSCORE_CACHE="${RECONSCORE_CACHE:-${TMPDIR:-/tmp}/reconscore-gpu-cache}"
# fail here, not mid-run: a version the wheels need that the image does not have (--no-deps does not check it;
# open_clip needs timm >= 1.0.17, and timm comes from the image)
"$py" "$repo/benchmarks/gpu/check_imports.py" --versions "$deps"
"$py" - << 'PY'
# every package the benchmark needs (benchmarks/gpu/check_imports.py checks the full list)
import diffusers, dreamsim, huggingface_hub, open_clip, peft, requests, torch, transformers  # noqa: F401
print("torch", torch.__version__, "| transformers", transformers.__version__, "| huggingface_hub",
      huggingface_hub.__version__, "| diffusers", diffusers.__version__, "| open_clip", open_clip.__version__,
      "| peft", peft.__version__, "| requests", requests.__version__, "|", torch.cuda.get_device_name())
PY
exec timeout 470 "$py" "$repo/benchmarks/gpu_throughput.py" --budget-s 380 "$@"
