"""Will benchmarks/gpu/run.sh find every module it imports on the lent GPU machine?

Runs benchmarks/gpu_throughput.py here, scaled down on the CPU (the same loaders, scorer, pipeline and captioner
as the GPU run), records every module it imported, and maps each one to the distribution that provides it
(importlib.metadata). Each must be the standard library, this repository, a wheel in benchmarks/gpu/wheels/
(prepare.sh), or on the GPU image (benchmarks/gpu/image.txt, the one place that lists it). It also lists the
wheels' declared requirements that neither provides (a requirement the run never imports is reported, not
failed: e.g. diffusers declares importlib_metadata, which it imports only on Python < 3.8).

    python benchmarks/gpu/check_imports.py          # after prepare.sh; exit 0 when nothing is missing
    python benchmarks/gpu/check_imports.py --versions DIR   # run.sh, after installing the wheels into DIR

`--versions` checks what pip's --no-deps skips: every installed wheel's requirement that is present must be
of a version it accepts (open_clip needs timm >= 1.0.17, and timm comes from the image).

Module names are mapped with this environment's metadata; run it in an environment that has the wheels'
packages installed (the project's venv does).
"""

from __future__ import annotations

import email
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIRST_PARTY = {"recon_score", "describer", "eval", "retrieval", "preference_data", "benchmarks", "tests"}
# the scaled-down run of tests/recon_score/test_shapes.py: every stage of the GPU run, in about a minute on a CPU
SCALED_RUN = [
    "--device=cpu",
    "--scale=0.02",
    "--sizes=64",
    "--batches=1",
    "--steps=1",
    "--full-steps=2",
    "--max-sequence-length=96",
    "--n=2",
    "--vlm-tokens=2",
    "--budget-s=100000",
]
CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("gpu_throughput", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.main(sys.argv[3:])
json.dump(sorted({m.partition(".")[0] for m in sys.modules}), open(sys.argv[2], "w"))
"""


def normalize(name: str) -> str:
    """PEP 503 name: `charset_normalizer`, `Charset-Normalizer` -> `charset-normalizer`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_distributions(path: Path = HERE / "image.txt") -> tuple[set[str], set[str]]:
    """(installed, optional) distributions of the GPU image: the first word of each line; lines after
    `[optional]` are imported here only because they are installed here (their importer checks first)."""
    installed: set[str] = set()
    optional: set[str] = set()
    target = installed
    for line in path.read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if words == ["[optional]"]:
            target = optional
        elif words:
            target.add(normalize(words[0]))
    return installed, optional


def with_requirements(names: set[str]) -> set[str]:
    """`names` and everything they require (this environment's metadata; extras left out), as pip installs."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend(d for d in map(_required, reqs) if d and d not in seen)
    return seen


def wheel_distributions(folder: Path = HERE / "wheels") -> dict[str, list[str]]:
    """Distribution name -> its declared requirements (Requires-Dist without extras), for every wheel."""
    out = {}
    for wheel in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            text = z.read(meta).decode("utf-8")
        parsed = email.message_from_string(text)
        out[normalize(parsed["Name"])] = parsed.get_all("Requires-Dist") or []
    return out


def _required(requirement: str) -> str | None:
    """The distribution a Requires-Dist line needs on Linux, Python 3.11/3.12; None if only for an extra or
    another platform/Python."""
    from packaging.requirements import Requirement

    req = Requirement(requirement)
    if req.marker is not None:
        envs = [{"python_version": v, "sys_platform": "linux", "extra": ""} for v in ("3.11", "3.12")]
        if not any(req.marker.evaluate(env) for env in envs):
            return None
    return normalize(req.name)


def imported_modules(python: str = sys.executable) -> list[str]:
    """Top-level modules the scaled-down benchmark run imported (in a fresh process)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "modules.json"
        cmd = [python, "-c", CHILD, str(REPO / "benchmarks" / "gpu_throughput.py"), str(out), *SCALED_RUN]
        cmd.append(f"--json={Path(tmp) / 'g.json'}")
        env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        subprocess.run(cmd, check=True, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def check(
    modules: list[str], wheels: dict[str, list[str]], image: set[str], optional: set[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """(missing: imported modules nothing provides, notes: optional imports, modules without a distribution,
    wheel requirements nothing provides)."""
    owners = metadata.packages_distributions()
    have = set(wheels) | with_requirements(image)  # wheels install with --no-deps: their own only
    missing, notes = [], []
    for module in modules:
        if (
            module in sys.stdlib_module_names
            or module in FIRST_PARTY
            or module in ("__main__", "__mp_main__")
        ):
            continue
        dists = {normalize(d) for d in owners.get(module, [])}
        if not dists:
            notes.append(f"{module}: no distribution (an extension or generated module)")
        elif dists & have:
            continue
        elif dists & optional:
            notes.append(f"{module}: optional ({', '.join(sorted(dists))}; its importer checks first)")
        else:
            missing.append(f"{module} (from {', '.join(sorted(dists))})")
    notes += sorted(
        f"{dist}: required by the {name} wheel, neither a wheel nor on the image"
        for name, reqs in wheels.items()
        for dist in _all(reqs)
        if dist not in have
    )
    return missing, notes


def _all(requirements: list[str]) -> list[str]:
    return [d for d in map(_required, requirements) if d]


def unmet_versions(deps: Path, search: list[str] | None = None) -> list[str]:
    """Requirements of the distributions installed in `deps` that are present (in `deps`, then `search`, the
    order PYTHONPATH gives) at a version the requirement does not accept. Absent ones are `check`'s business."""
    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(deps), *(sys.path if search is None else search)]):
        found.setdefault(normalize(dist.metadata["Name"]), dist.version)  # the first on the path wins
    problems = []
    for dist in metadata.distributions(path=[str(deps)]):
        for line in dist.requires or []:
            name = _required(line)
            have = found.get(name) if name else None
            req = Requirement(line)
            if have is not None and not req.specifier.contains(have, prereleases=True):
                problems.append(f"{dist.metadata['Name']} needs {req.name}{req.specifier}, found {have}")
    return sorted(set(problems))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--versions"] and len(argv) == 2:
        problems = unmet_versions(Path(argv[1]))
        for line in problems:
            print(f"VERSION on the GPU machine: {line}", file=sys.stderr)
        print("ok: every requirement present is of an accepted version" if not problems else "")
        return 1 if problems else 0
    wheels = wheel_distributions()
    if not wheels:
        print(f"no wheels in {HERE / 'wheels'}: run benchmarks/gpu/prepare.sh first", file=sys.stderr)
        return 2
    image, optional = image_distributions()
    modules = imported_modules()
    missing, notes = check(modules, wheels, image, optional)
    print(f"{len(modules)} top-level modules imported; wheels: {', '.join(sorted(wheels))}")
    for line in notes:
        print(f"note: {line}")
    for line in missing:
        print(f"MISSING on the GPU machine: {line}")
    print("ok: every imported module is provided" if not missing else f"{len(missing)} module(s) missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
