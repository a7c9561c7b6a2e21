#!/usr/bin/env bash
# A real (non-editable) wheel in a fresh venv, run from outside the repository: the smoke score, generate's help
# and one generate call on the offline stand-in LLM. Catches data files the wheel leaves out.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=${PYTHON:-python3.11}
command -v "$py" >/dev/null 2>&1 || py=python3
"$repo/.venv/bin/python" -m pip wheel --no-deps --no-build-isolation -q -w "$work/dist" "$repo"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
"$work/venv/bin/python" -m pip install -q "$(ls "$work"/dist/reconscore-*.whl)"
cd "$work"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RECONSCORE_CACHE="$work/cache"
bin="$work/venv/bin"
"$bin/python" -c "import recon_score, sys; assert '$repo' not in recon_score.__file__, recon_score.__file__"
"$bin/reconscore" score --preset smoke --out "$work/runs/sample"
"$bin/reconscore" generate paraphrase --help >/dev/null
printf '%s\n' '{"id": "a", "image": "a.tif", "caption": "a farm with two houses"}' > caps.jsonl
"$bin/reconscore" generate paraphrase --captions caps.jsonl --model smoke:qwen3-text --out "$work/runs/para"
test -s "$work/runs/para/generated.jsonl"
echo "wheel smoke: ok"
