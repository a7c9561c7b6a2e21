#!/usr/bin/env bash
# Run on a machine with PyPI access, from anywhere: fetches the wheels the lent GPU machine lacks (what it has:
# benchmarks/gpu/image.txt; it has no network) into benchmarks/gpu/wheels/ (git-ignored). Versions: the ones this
# repository is tested with; nothing else is fetched (--no-deps). benchmarks/gpu/check_imports.py then checks that
# every module the benchmark imports is one of these wheels or on the image.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
rm -rf "$here/wheels"
mkdir -p "$here/wheels"
# Pure-Python wheels (py3-none-any) only, so they install on the image's Python whatever its version (3.11, 3.12).
# requests, urllib3, charset-normalizer: diffusers imports requests (diffusers/utils/loading_utils.py), and the
# image has no requests: huggingface_hub 1.x uses httpx, which brings certifi and idna (image.txt).
"$python" -m pip download --quiet --no-deps --only-binary=:all: --platform any --implementation py \
  --dest "$here/wheels" \
  "diffusers==0.42.1" "open_clip_torch==3.3.0" "peft==0.21.2" "ftfy==6.3.1" "wcwidth==0.9.4" \
  "requests==2.34.2" "urllib3==2.8.0" "charset-normalizer==3.5.3"
# dreamsim 0.2.1 is published as a source archive only: `pip wheel` turns it into a pure-Python wheel here, so the
# GPU side needs no build.
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$here/wheels" "dreamsim==0.2.1"
for whl in "$here"/wheels/*.whl; do
  case "$whl" in
    *-py3-none-any.whl | *-py2.py3-none-any.whl) ;;
    *) echo "not a pure-Python wheel: $whl" >&2; exit 1 ;;
  esac
done
bytes=$(du -sb "$here/wheels" | cut -f1)
ls -l "$here/wheels"
echo "wheels: $((bytes / 1024)) KiB in $here/wheels"
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
  echo "more than 64 MiB: too large to travel with the working tree" >&2
  exit 1
fi
